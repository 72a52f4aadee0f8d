"""The gatekeeper's Kafka loop: requests and run boundaries in, decisions out, exactly once.

One consumer in group ``<prefix>.gatekeeper`` reads ``requests`` and
``runs`` (co-partitioned, range assignor, ``read_committed``), so an
instance owning partition p of one owns p of the other. ``runs`` holds each
run's ``RUN_STARTED`` and terminal event, written there by the producer
workers as well as to ``events`` (``services.producer.publish`` says why a
run's end is on one if and only if it is on the other, and why a client
never sees an end on ``events`` that ``runs`` does not hold yet): the
gatekeeper never reads ``events``, so the tokens a run streams cost it
nothing. Records read are counted per topic (``stats["read <topic>"]``). One transactional
producer per instance commits every owned partition's batches together, one
transaction at a time. Zombies are fenced twice (``services.kafka.fencing``):
offsets commit with the group generation the instance joined (KIP-447), so
a member the group has moved past cannot commit; and the producer's id names
the owned partitions (``<prefix>.gatekeeper.p0-3``), so an instance
restarted onto the same assignment fences its dead predecessor at once.

This module is the consume-and-route loop: poll, file each record with its
partition (steps 1 and 3 of the commit procedure, written down in
``commit``), hand the partitions with work to ``commit.launch``, pause a
partition whose routed backlog outgrows twice ``max_batch`` records until
its batches catch up (bounded memory), and watch for stalls. Taking
partitions over and handing them back is ``takeover``; what the three share
is one ``state.Instance``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from contracts import ThreadState
from services.gatekeeper import commit, takeover
from services.gatekeeper.agents import Agents, requested_agents
from services.gatekeeper.batch import Limits
from services.gatekeeper.expirer import Expirer
from services.gatekeeper.heap import Heap
from services.gatekeeper.partition import Owned, paired, progress
from services.gatekeeper.settings import GatekeeperSettings
from services.gatekeeper.stall import StallWatch
from services.gatekeeper.state import Instance
from services.gatekeeper.telemetry import Telemetry
from services.gatekeeper.threadstore import Threads
from services.kafka.admin import check_compacted
from services.kafka.clients import (
    ConsumerRebalanceListener,
    ConsumerRecord,
    TopicPartition,
    new_consumer,
)
from services.kafka.fencing import leave_group
from services.kafka.lookup import wait_for_broker, wait_for_topics
from services.kafka.polling import Records, poll_until
from services.kafka.sizing import RecordLimit
from services.kafka.transactions import shorten_commit_gap_backoff
from services.runtime.settings import KafkaSettings, LimitSettings
from services.runtime.tracing import Entropy

log = logging.getLogger(__name__)

BUSY_POLL_MS = 5
"""How long a poll waits while routed records wait for their turn (``_busy``)."""
IDLE_POLL_MS = 1000
"""How long a poll waits otherwise: records end it at once, and so does the stop
(``polling``); what the loop does besides routing (the agents' refresh, gauges, stall
checks) needs a turn a second at most, and every empty turn costs CPU."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class Processor:
    """The gatekeeper loop; ``run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        kafka: KafkaSettings,
        settings: GatekeeperSettings,
        *,
        clock: Callable[[], datetime] = utcnow,
        client_id: str = "agui-gatekeeper",
        entropy: Entropy = os.urandom,
    ) -> None:
        group_id = f"{kafka.topic_prefix}.gatekeeper"
        self.state = Instance(
            kafka, settings, client_id, clock, entropy,
            agents=Agents(kafka.topics, settings.agents_refresh_s),
            heap=Heap(settings.gc_full_s),
            telemetry=Telemetry(group_id, interval_s=settings.gauges_s,
                                running_limit_s=settings.running_too_long_s),
            limits=Limits(RecordLimit(kafka.max_record_bytes), LimitSettings().limits),
            stall=StallWatch(settings.stall_s),
        )
        if settings.on_expiry == "cancel":
            self.state.expirer = Expirer(kafka, client_id, clock, self._committed_state)
        if settings.state_dir is not None:
            self.state.threads = Threads(settings.state_dir, kafka.topics.threads,
                                         settings.state_cache_mb, settings.state_grace_s)
        self.settings = settings
        self.topics = kafka.topics

    def _committed_state(self, partition: int, thread_id: str) -> ThreadState | None:
        owned = self.state.owned.get(partition)
        return owned.states.get(thread_id) if owned is not None else None

    @property
    def stats(self) -> Counter[str]:
        return self.state.stats

    @property
    def assigned(self) -> asyncio.Event:
        """Set once partitions are assigned and restored (tests wait on it)."""
        return self.state.assigned

    @property
    def ready(self) -> bool:
        """Readiness (``/readyz``): in the group, every partition assigned to it restored,
        none stalled (``failing``)."""
        st = self.state
        if st.consumer is None or not st.joined or st.fatal is not None:
            return False
        owns = {tp.partition for tp in st.consumer.assignment()} <= set(st.owned)
        return owns and not self.failing

    @property
    def failing(self) -> dict[str, str]:
        """The readiness checks failing now, by name (``partition-<p>``, ``state-store-<p>``),
        saying why."""
        stores = self.state.threads.failing() if self.state.threads is not None else {}
        return stores | {
            f"partition-{p}": f"input waiting, committed offsets unchanged for {waited:.0f} s"
            for p, waited in self.state.stall.stalled(time.monotonic()).items()
        }

    @property
    def partitions(self) -> list[int]:
        """The partition numbers this instance owns now."""
        return sorted(self.state.owned)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume, decide and commit until ``stop`` is set; then hand everything back."""
        st = self.state
        t = self.topics
        if not await wait_for_broker(st.kafka, stop):  # not ready meanwhile
            return
        if not await wait_for_topics(st.kafka, [t.requests, t.runs, t.decisions, t.threads,
                                                t.deadletter], stop):
            return
        await check_compacted(st.kafka, (t.threads,))  # the store's changelog
        shorten_commit_gap_backoff()
        st.heap.start()
        consumer = new_consumer(
            st.kafka,
            st.client_id,
            group_id=st.group_id,
            max_poll_records=self.settings.max_batch,
            session_timeout_ms=self.settings.session_timeout_ms,
            group_instance_id=self.settings.instance_id,
            fetch_min_bytes=self.settings.fetch_min_bytes,
            fetch_max_wait_ms=self.settings.fetch_wait_ms,
        )
        consumer.subscribe([self.topics.requests, self.topics.runs], listener=_Listener(st))
        st.consumer = consumer
        await consumer.start()
        expiring = (asyncio.create_task(st.expirer.run(stop), name="expirer")
                    if st.expirer is not None else None)
        try:
            await st.agents.refresh(consumer, force=True)
            while not stop.is_set():
                generation = st.generation
                epochs = {p: o.epoch for p, o in st.owned.items()}
                got = await (
                    consumer.getmany(timeout_ms=BUSY_POLL_MS, max_records=self.settings.max_batch)
                    if self._busy() else
                    poll_until(consumer, stop, timeout_ms=IDLE_POLL_MS,
                               max_records=self.settings.max_batch))
                named = requested_agents(got, self.topics.requests, st.agents.names,
                                         st.limits.max_bytes)
                if named:  # looked up before they are decided, not refused as unknown
                    await st.agents.learn(consumer, named)
                async with st.lock:
                    st.raise_if_fatal()
                    if generation != st.generation:
                        st.read_again(st.owned.values())
                        continue
                    await self._route(got, epochs)
                    commit.launch(st)
                    self._apply_backpressure()
                await st.agents.refresh(consumer)
                await st.telemetry.tick(consumer, st.clock())
                if st.stall.due(time.monotonic()):
                    seen = await progress(consumer, st.owned.values())
                    for p in st.stall.observe(seen, time.monotonic()):
                        log.error("partition %d has input but its offsets have not moved for "
                                  "%g s: not ready", p, self.settings.stall_s)
        finally:
            await takeover.settle_takeover(st)
            async with st.lock:
                st.accepting = False
                await commit.drain(st)
                await takeover.release(st)
            await leave_group(consumer)  # a static member: its partitions move on now
            await consumer.stop()
            if expiring is not None:
                expiring.cancel()
                await asyncio.gather(expiring, return_exceptions=True)
            st.heap.stop()
            if st.threads is not None:
                st.threads.close()
            st.telemetry.stopped()
            log.info("gatekeeper stopped", extra={"stats": dict(st.stats)})
        st.raise_if_fatal()  # a failure the last round or the drain met is no clean stop

    def _busy(self) -> bool:
        """True when routed records wait for a barrier or a linger, or a partition is paused
        until its backlog shrinks (``_apply_backpressure``): poll again soon.

        A partition whose only work is a commit in flight needs no polling: the
        commit launches the partition's next batch itself when it ends.
        """
        owned = self.state.owned.values()
        if any(o.held or o.inbox for o in owned):
            return True
        paused = self.state.require_consumer().paused()
        return bool(paused) and any(o.requests in paused or o.runs in paused for o in owned)

    async def _route(self, got: Records, epochs: dict[int, int]) -> None:
        """Steps 1 and 3: file the polled records with their partitions, with barriers.

        Everything awaited (positions, the barrier offsets) is read first and
        the partitions are changed after, in one step, so a commit finishing
        meanwhile never sees records filed without their barrier.
        """
        consumer = self.state.require_consumer()
        positions = {p: await consumer.position(o.runs) for p, o in self.state.owned.items()}
        asking = [
            o
            for tp, records in got.items()
            if tp.topic == self.topics.requests
            and (o := self.state.owned.get(tp.partition))
            and any(self._may_be_closing(o, r) for r in records if r.offset >= o.next_request)
        ]
        ends = await self._barriers(asking)
        stale: set[int] = set()
        stats = self.state.stats
        for tp, records in got.items():
            is_runs = tp.topic == self.topics.runs
            stats[f"read {tp.topic}"] += len(records)
            owned = self.state.owned.get(tp.partition)
            if owned is None:
                continue
            if owned.epoch != epochs.get(owned.partition):
                stale.add(owned.partition)  # rewound while these were in flight
            elif is_runs:
                fresh_events = [r for r in records if r.offset >= owned.next_event]
                if fresh_events:
                    owned.inbox.extend(fresh_events)
                    owned.waiting_since = owned.waiting_since or time.monotonic()
            elif taken := [r for r in records if r.offset >= owned.next_request]:
                owned.held.extend(taken)
                owned.next_request = taken[-1].offset + 1
                owned.held_since = owned.held_since or time.monotonic()
                owned.waiting_since = owned.waiting_since or owned.held_since
                if owned.runs in ends:
                    owned.barrier = max(owned.barrier or 0, ends[owned.runs])
        for p, owned in self.state.owned.items():
            if owned.epoch == epochs.get(p) and p not in stale:
                owned.next_event = max(owned.next_event, positions[p])
        self.state.read_again(self.state.owned[p] for p in stale)

    def _apply_backpressure(self) -> None:
        """Pause a topic partition whose routed backlog is too long; resume it when short."""
        consumer = self.state.require_consumer()
        limit = 2 * self.settings.max_batch
        paused = consumer.paused()
        for owned in self.state.owned.values():
            for tp, backlog in ((owned.requests, owned.held), (owned.runs, owned.inbox)):
                if len(backlog) > limit and tp not in paused:
                    consumer.pause(tp)
                elif len(backlog) <= limit // 2 and tp in paused:
                    consumer.resume(tp)

    @staticmethod
    def _may_be_closing(owned: Owned, record: ConsumerRecord[Any, Any]) -> bool:
        """True when the request's thread is running: its run may have closed unseen.

        Only a running thread can be misjudged for want of an event (a resume
        sent right after its interrupt must not meet ``thread_busy``); idle and
        interrupted threads change only by decisions, so their requests need
        no barrier. The record key is the threadId (a request whose key is
        not is refused without its thread anyway).
        """
        key = record.key.decode("utf-8", "replace") if record.key is not None else ""
        state = owned.states.get(key)
        return state is not None and state.status == "running"

    async def _barriers(self, asking: list[Owned]) -> dict[TopicPartition, int]:
        """Step 3: the ``runs`` offsets that newly polled requests must wait for."""
        if not asking or self.settings.events_wait_ms == 0:
            return {}
        ends: dict[TopicPartition, int] = await self.state.require_consumer().end_offsets(
            [o.runs for o in asking]
        )
        return ends


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands aiokafka's rebalance callbacks to ``takeover``."""

    def __init__(self, state: Instance) -> None:
        self._state = state

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await takeover.revoke(self._state)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        st = self._state
        topics = st.kafka.topics
        kept, unpaired = paired(assigned, topics.requests, topics.runs)
        if unpaired:
            log.error("assigned %s without the same partition of %s / %s (a member that "
                      "reads other topics, e.g. a gatekeeper of an earlier version, or topics "
                      "that are not co-partitioned: see agui-relay topics describe); they "
                      "are paused and not decided", sorted(map(str, unpaired)),
                      topics.requests, topics.runs)
            st.require_consumer().pause(*unpaired)
        takeover.assign(st, kept)
