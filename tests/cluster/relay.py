"""The whole relay under load on a three-node cluster, with broker faults on a schedule.

``drill`` starts a deployment (``faults.harness.Stack``: gatekeeper,
producer worker and consumer service as processes) on the cluster, runs
the fault suite's loads through it — interrupt → resume flows straight on
Kafka (``KafkaLoad``, resending undecided requests) and over HTTP/SSE
through the consumer service (``HttpLoad``) — and, while they run, the
scenario's faults against the brokers (``Brokers``: SIGKILL, SIGSTOP, clean
stops; each followed by a probe run measuring when the relay served end to
end again). No service is ever restarted: a service that exits fails the
scenario at once, and each must still be on its first start at the end.

Afterwards: the longest pause in deciding (committed decisions' record
timestamps, from the first fault to the last), the records still held by an
open transaction once the load is over (``probes.held``: must be none), and
the fault suite's independent checker (``faults.scenario.verify``), whose
summary line carries every figure. The deployment's topics are deleted at
the end, so the shared cluster does not grow from scenario to scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.errors import KafkaError
from faults.checker import Report
from faults.follower import Follower
from faults.harness import Stack, StackConfig, unique_prefix
from faults.load import HttpLoad, KafkaLoad, LoadStats
from faults.scenario import verify
from faults.snapshot import Snapshot

from cluster.probes import delete_topics, held_after, longest_pause, transaction_coordinator
from deploy.kafka import launcher
from services.gatekeeper.partition import transactional_id

PROBE_LIMIT_S = 240.0
"""A probe run must go end to end within this after a fault (bounded, not a speed claim)."""
IN_SYNC_LIMIT_S = 180.0


@dataclass(frozen=True)
class Load:
    """How much load runs around the faults (modest: two cores, three JVMs)."""

    kafka_concurrency: int = 6
    http_concurrency: int = 2
    lead_s: float = 4.0
    """Load before the first fault."""
    tail_s: float = 4.0
    """Load after the last fault."""
    flows: int = 5000
    duration_s: float = 900.0
    """Upper bounds only: flows stop starting when the schedule is over."""


LIGHT = Load(kafka_concurrency=3, http_concurrency=1)


@dataclass
class Step:
    """One fault: how long deciding paused in it, when a run was served end to end again."""

    what: str
    started_at: float = field(default_factory=time.time)
    """Wall clock (decision records carry wall-clock timestamps)."""
    ended_at: float = 0.0
    served_s: float | None = None
    in_sync_s: float | None = None
    """From the node's start (or resume) until every replica was in sync again."""
    pause_s: float | None = None
    """The longest gap between decisions from the fault to the end of its recovery."""

    def line(self) -> str:
        paused = "" if self.pause_s is None else f"longest pause in deciding {self.pause_s:.1f} s, "
        served = "never" if self.served_s is None else f"{self.served_s:.1f} s"
        synced = "" if self.in_sync_s is None else f", in sync {self.in_sync_s:.1f} s later"
        return f"{self.what} ({paused}served again {served}{synced})"


@dataclass
class Brokers:
    """The faults a scenario does to the cluster, recorded with their recoveries."""

    cluster: launcher.Cluster
    stack: Stack
    steps: list[Step] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0

    def step(self, what: str) -> Step:
        """A new step, starting now."""
        step = Step(what)
        self.steps.append(step)
        return step

    async def served(self, step: Step, since: float) -> None:
        """Run a probe to its end; record how long after ``since`` (monotonic) it ended."""
        await self.stack.probe(PROBE_LIMIT_S)
        step.served_s = time.monotonic() - since

    async def coordinator(self) -> tuple[str, int]:
        """The gatekeeper's transactional id (one instance owns every partition), its node."""
        settings = self.stack.settings
        txn_id = transactional_id(settings.topic_prefix, range(settings.partitions))
        node_id = await transaction_coordinator(self.cluster.bootstrap, txn_id)
        return txn_id, self.cluster.index_of(node_id)

    async def kill(self, i: int, why: str) -> Step:
        """SIGKILL node ``i``; serve a run on the other two; start it again; in sync."""
        step = self.step(f"SIGKILL node {self.cluster.nodes[i].node_id} ({why})")
        since = time.monotonic()
        await asyncio.to_thread(self.cluster.kill_node, i)
        await self.served(step, since)
        await self.back(i, step)
        step.ended_at = time.time()
        return step

    async def isolate(self, i: int, why: str, paused_s: float) -> Step:
        """SIGSTOP node ``i`` for ``paused_s``, then SIGCONT; a probe run starts at the pause.

        The probe may end while the node is paused or after it is resumed
        (a client whose request went to the paused node waits for its
        request timeout); the node is resumed after ``paused_s`` either way.
        """
        step = self.step(f"SIGSTOP node {self.cluster.nodes[i].node_id} ({why}) {paused_s:.0f} s")
        since = time.monotonic()
        await asyncio.to_thread(self.cluster.kill_node, i, signal.SIGSTOP)
        probe = asyncio.ensure_future(self.served(step, since))
        try:
            await asyncio.sleep(paused_s)
        finally:
            await asyncio.to_thread(self.cluster.kill_node, i, signal.SIGCONT)
        await probe
        await self.in_sync(step)
        step.ended_at = time.time()
        return step

    async def restart(self, i: int, down_s: float = 1.0) -> Step:
        """Stop node ``i`` cleanly, start it again, serve a run, wait until in sync."""
        step = self.step(f"restart node {self.cluster.nodes[i].node_id}")
        since = time.monotonic()
        await asyncio.to_thread(self.cluster.stop_node, i)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.cluster.start_node, i, 120)
        await self.served(step, since)
        await self.in_sync(step)
        step.ended_at = time.time()
        return step

    async def back(self, i: int, step: Step) -> None:
        """Start node ``i`` again and wait until every partition is in sync."""
        await asyncio.to_thread(self.cluster.start_node, i, 120)
        await self.in_sync(step)

    async def in_sync(self, step: Step) -> None:
        """Wait until every replica is in sync; record how long that took."""
        since = time.monotonic()
        await asyncio.to_thread(self.cluster.wait_in_sync, IN_SYNC_LIMIT_S)
        step.in_sync_s = time.monotonic() - since

    def line(self) -> str:
        return f"{len(self.steps)} faults: " + "; ".join(s.line() for s in self.steps)


Faults = Callable[[Brokers], Awaitable[None]]


@dataclass
class Outcome:
    """What a drill measured; the checker's report is in ``report``."""

    report: Report
    kafka: LoadStats
    http: LoadStats
    pause_s: float
    brokers: Brokers


async def drill(cluster: launcher.Cluster, workdir: Path, summary: Callable[[str], None],
                title: str, faults: Faults, load: Load | None = None, *,
                keep_topics: bool = False) -> Outcome:
    """Run ``faults`` under ``load`` on a fresh deployment; check everything; one summary line.

    The deployment's topics are deleted afterwards unless ``keep_topics``.
    """
    config = StackConfig(gatekeepers=1, producers=1, consumers=1)
    stack = Stack(cluster.bootstrap, unique_prefix("cl"), workdir, config)
    try:
        async with stack:
            return await _drill(stack, Brokers(cluster, stack), summary, title, faults,
                                load or Load())
    finally:
        if not keep_topics:
            with contextlib.suppress(KafkaError, OSError):
                await delete_topics(stack.settings)


async def _drill(stack: Stack, brokers: Brokers, summary: Callable[[str], None], title: str,
                 faults: Faults, load: Load) -> Outcome:
    done = asyncio.Event()

    async def schedule() -> None:
        try:
            await asyncio.sleep(load.lead_s)
            brokers.started_at = time.time()
            await faults(brokers)
            brokers.ended_at = time.time()
            await asyncio.sleep(load.tail_s)
        finally:
            done.set()

    async with Follower(stack.settings) as follower, KafkaLoad(
            stack.settings, follower, resend_s=8.0, step_s=PROBE_LIMIT_S,
            delay_ms=50) as kafka, HttpLoad(
            stack.consumer_urls, follower, delay_ms=200, step_s=PROBE_LIMIT_S) as http:
        kafka_stats, http_stats, _ = await stack.watching(asyncio.gather(
            kafka.run(load.flows, load.kafka_concurrency, load.duration_s, until=done),
            http.run(load.flows, load.http_concurrency, load.duration_s, until=done),
            schedule()))
    stack.check_alive()
    restarted = [p.name for p in stack.all() if p.starts != 1]
    assert not restarted, f"{title}: services restarted: {restarted}"
    async with Snapshot(stack.settings) as snapshot:
        decisions = (await snapshot.refresh()).decisions
    pause = longest_pause(decisions, brokers.started_at, brokers.ended_at)
    for step in brokers.steps:
        step.pause_s = longest_pause(decisions, step.started_at,
                                     step.ended_at or brokers.ended_at)
    still_held = await held_after(stack.settings)
    report = await verify(
        stack, summary, title,
        f"{brokers.line()}; longest pause in deciding {pause:.1f} s; no service restarted; "
        f"held after the load {sum(still_held.values())}; kafka load: {kafka_stats.line()}; "
        f"http load: {http_stats.line()}", settle_s=90.0)
    assert not still_held, f"{title}: records held by open transactions: {still_held}"
    assert kafka_stats.gave_up == 0, kafka_stats.line()
    return Outcome(report, kafka_stats, http_stats, pause, brokers)
