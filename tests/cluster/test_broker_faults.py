"""Broker faults under load on three nodes: the relay loses nothing and never needs a restart.

Each scenario runs the whole relay (gatekeeper, producer worker, consumer
service, as processes) on the shared cluster (replication factor 3,
``min.insync.replicas=2``, ``acks=all``) under interrupt → resume flows on
Kafka and over HTTP, and does one kind of broker fault:

- SIGKILL the transaction coordinator of the gatekeeper's transactional id
  (FindCoordinator, asked again before each kill), restarting it between
  kills: once in the shortened version, three times in the full one;
- SIGKILL the leader of the ``events`` partition an open SSE stream reads,
  while the run is between its message and its end: the stream must still
  get every event once and its end;
- a rolling restart: each node stopped cleanly and started again in turn,
  waiting until every replica is in sync before the next;
- one node stopped with SIGSTOP for longer than the session timeouts (the
  brokers' 6 s, the services' 6 s) and resumed with SIGCONT.

The default ``make test`` runs one fault of each kind, in that order, on one
deployment under one load (``test_one_fault_of_each_kind``, marked
``cluster_short``); ``make test-cluster`` (``AGUI_CLUSTER_FULL=1``) runs
each kind as its own scenario, the coordinator killed three times.

``relay.drill`` checks the rest: the independent checker finds nothing lost
or doubled, no thread left running, no approved effect twice; nothing is
held by an open transaction afterwards; no service was restarted; the
summary line gives the longest pause in deciding.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from faults.load import new_ids, pool_limits, run_input
from faults.sse import read_stream

from cluster.relay import Brokers, Load, drill
from deploy.kafka import launcher
from services.kafka.partitioning import partition_for

pytestmark = pytest.mark.cluster

SESSION_TIMEOUT_S = 6.0
"""The brokers' ``broker.session.timeout.ms`` and the services' group session timeouts."""
STREAM_DELAY_MS = 20_000
"""How long the streamed run waits between its message and its end (the kill lands there)."""


async def coordinator_kills(brokers: Brokers, reps: int, interval_s: float = 3.0) -> None:
    """SIGKILL the gatekeeper's transaction coordinator ``reps`` times (found anew each time)."""
    for rep in range(reps):
        if rep:
            await asyncio.sleep(interval_s)
        txn_id, victim = await brokers.coordinator()
        await brokers.kill(victim, f"coordinator of {txn_id}")


class OpenStream:
    """One SSE stream of a long ``scripted`` run, read event by event as it arrives."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.thread_id, self.run_id, _ = new_ids("stream", 0)
        self.events: list[dict[str, Any]] = []
        self.status = 0
        self.message_sent = asyncio.Event()
        self.ended_at: float | None = None

    async def read(self) -> None:
        script = {"text": "streamed through a broker kill", "delayMs": STREAM_DELAY_MS}
        body = orjson.dumps(run_input(self.thread_id, self.run_id, script=script))
        async with httpx.AsyncClient(limits=pool_limits(2)) as client, client.stream(
                "POST", f"{self.url}/agents/scripted", content=body, timeout=300.0,
                headers={"content-type": "application/json",
                         "accept": "text/event-stream"}) as response:
            self.status = response.status_code
            async for event in read_stream(response):
                self.events.append(event)
                if event.get("type") == "TEXT_MESSAGE_END":
                    self.message_sent.set()
        self.ended_at = time.monotonic()

    @property
    def types(self) -> list[str]:
        return [str(e.get("type")) for e in self.events]

    def check(self) -> None:
        """Every event once, in order, and the end."""
        assert self.status == 200
        assert self.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                              "TEXT_MESSAGE_END", "RUN_FINISHED"], self.types


async def stream_leader_kill(brokers: Brokers) -> OpenStream:
    """Open a stream; once its message is out, SIGKILL its events partition's leader."""
    stream = OpenStream(brokers.stack.consumer_urls[0])
    reading = asyncio.create_task(stream.read())
    async with asyncio.timeout(240):
        await asyncio.wait([reading, asyncio.create_task(stream.message_sent.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
    assert stream.message_sent.is_set(), f"stream ended early: {stream.types}"
    settings = brokers.stack.settings
    partition = partition_for(stream.thread_id, settings.partitions)
    leader = await asyncio.to_thread(brokers.cluster.leader, settings.topics.events, partition)
    assert leader is not None
    killed = time.monotonic()
    step = await brokers.kill(leader, f"leader of {settings.topics.events}-{partition}, "
                                      f"read by an open stream")
    async with asyncio.timeout(300):
        await reading
    assert stream.ended_at is not None
    step.what += f", the stream got its end {stream.ended_at - killed:.1f} s after the kill"
    return stream


async def rolling_restart(brokers: Brokers) -> None:
    for i in range(len(brokers.cluster.nodes)):
        await brokers.restart(i)


async def isolate_coordinator(brokers: Brokers) -> None:
    txn_id, victim = await brokers.coordinator()
    await brokers.isolate(victim, f"coordinator of {txn_id}", 2.5 * SESSION_TIMEOUT_S)


@pytest.mark.cluster_short
async def test_one_fault_of_each_kind(relay_cluster: launcher.Cluster, tmp_path: Path,
                                      summary: Callable[[str], None]) -> None:
    streams: list[OpenStream] = []

    async def faults(brokers: Brokers) -> None:
        await coordinator_kills(brokers, 1)
        streams.append(await stream_leader_kill(brokers))
        await rolling_restart(brokers)
        await isolate_coordinator(brokers)

    outcome = await drill(relay_cluster, tmp_path, summary,
                          "cluster: one fault of each kind", faults, Load(lead_s=2, tail_s=2))
    assert len(outcome.brokers.steps) == 6
    streams[0].check()


@pytest.mark.cluster_full
async def test_coordinator_sigkill_three_times(relay_cluster: launcher.Cluster, tmp_path: Path,
                                               summary: Callable[[str], None]) -> None:
    async def faults(brokers: Brokers) -> None:
        await coordinator_kills(brokers, 3)

    outcome = await drill(relay_cluster, tmp_path, summary, "cluster: coordinator SIGKILL x3",
                          faults, Load(kafka_concurrency=8, http_concurrency=2))
    assert len(outcome.brokers.steps) == 3


@pytest.mark.cluster_full
async def test_stream_partition_leader_sigkill(relay_cluster: launcher.Cluster, tmp_path: Path,
                                               summary: Callable[[str], None]) -> None:
    streams: list[OpenStream] = []

    async def faults(brokers: Brokers) -> None:
        streams.append(await stream_leader_kill(brokers))

    await drill(relay_cluster, tmp_path, summary, "cluster: stream partition leader SIGKILL",
                faults)
    streams[0].check()


@pytest.mark.cluster_full
async def test_rolling_restart(relay_cluster: launcher.Cluster, tmp_path: Path,
                               summary: Callable[[str], None]) -> None:
    outcome = await drill(relay_cluster, tmp_path, summary, "cluster: rolling restart",
                          rolling_restart)
    assert [s.what for s in outcome.brokers.steps] == ["restart node 1", "restart node 2",
                                                       "restart node 3"]


@pytest.mark.cluster_full
async def test_node_isolated_past_the_session_timeout(
    relay_cluster: launcher.Cluster, tmp_path: Path, summary: Callable[[str], None]
) -> None:
    await drill(relay_cluster, tmp_path, summary, "cluster: node isolated (SIGSTOP)",
                isolate_coordinator)
