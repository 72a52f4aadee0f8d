"""The gatekeeper's Kafka loop: requests and run boundaries in, decisions out, exactly once.

One consumer in group ``<prefix>.gatekeeper`` reads ``requests`` and
``events`` (co-partitioned, range assignor, ``read_committed``), so an
instance owning partition p of one owns p of the other. One transactional
producer per instance commits every owned partition's batches together, one
transaction at a time. Zombies are fenced twice (``services.kafka.fencing``):
offsets commit with the group generation the instance joined (KIP-447), so
a member the group has moved past cannot commit; and the producer's id names
the owned partitions (``<prefix>.gatekeeper.p0-3``), so an instance
restarted onto the same assignment fences its dead predecessor at once.

Commit procedure, for each owned partition p, in every round:

1. Poll once and file the records with their partition; drop those below
   p's read position (a re-fetch). If the assignment changed, or p was
   rewound, while the records were in flight, drop them and seek back to
   the read position.
2. Apply the run boundaries of ``events`` p to a ``Batch`` over p's committed
   thread states (in memory; other event types are skipped on their header).
3. When a new request is for a thread that is running, hold ``requests`` p
   until ``events`` p has been read up to the last stable offset it had when
   they were fetched (one ListOffsets for all such partitions), or
   ``events_wait_ms`` passed: a resume sent after its interrupt was
   published never meets the thread still running.
4. Decide the held requests in offset order (pure ``rules``).
5. p's batch joins the next transaction: decisions → ``decisions``,
   dispatches → ``dispatch.<agent>``, dead letters → ``deadletter``, the
   new thread states → ``threads`` partition p, and the next offsets of
   ``requests`` p and ``events`` p, with those of every other partition
   whose batch is ready, in ONE ``send_offsets_to_transaction``; commit. It
   runs in the background: polling goes on, and p's new records wait in
   ``Owned`` until the transaction carrying p's batch has ended; batches
   that become ready meanwhile ride the next one.
6. Only after the commit returns: each batch's thread states replace its
   partition's committed states and the committed offsets move. If step 5
   fails, or has not ended within ``transaction_deadline_s`` (a request the
   broker never answers), the transaction is aborted (if it still can be)
   and the producer replaced, which settles it; the group's committed offsets then tell
   whether it committed after all (``settle``): if so it is installed as in
   a success; if not, each partition it carried is sought back to its
   committed offsets and the held requests dropped: the same records are
   decided again (except the inputs of records the broker refused for their
   size, which are dead-lettered instead: ``refusals``). Offsets refused
   for a stale generation, or a producer fenced by a successor that took
   its id, need no asking: the successor
   decides from what Kafka holds, so the partitions are rewound and the
   instance decides nothing more until the group has assigned it partitions
   again.

On assignment, before any decision, in a task of its own (aiokafka sends no
heartbeat while its rebalance callback runs, and this can outlast the
session): start the producer named by the new partitions (its
``init_transactions`` fences a predecessor and aborts what it left open),
read the group's committed offsets once stable (a transaction of a previous
owner still holding some has ended), restore each partition's thread states
from ``threads`` (``store.restore``). On revocation: wait for the takeover,
the round and the transactions in flight, commit any offsets read past, stop
the producer, forget every partition. A partition whose routed backlog
outgrows twice ``max_batch`` records is paused until its batches catch up
(bounded memory).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from services.gatekeeper.agents import Agents
from services.gatekeeper.batch import Batch, Limits
from services.gatekeeper.heap import Heap
from services.gatekeeper.partition import Owned, outputs, progress, start_producer
from services.gatekeeper.refusals import set_aside
from services.gatekeeper.settings import GatekeeperSettings
from services.gatekeeper.settle import committed_offsets, settle
from services.gatekeeper.stall import StallWatch
from services.gatekeeper.store import restore
from services.gatekeeper.telemetry import Telemetry
from services.kafka.clients import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    TopicPartition,
    new_consumer,
)
from services.kafka.fencing import (
    FencedGroup,
    StaleGenerationError,
    fenced_group,
    is_member,
    request_rejoin,
)
from services.kafka.sizing import RecordLimit
from services.kafka.transactions import (
    RecordsRefusedError,
    TransactionStalledError,
    commit_outputs,
    is_fenced,
    shorten_commit_gap_backoff,
    stop_producer,
)
from services.runtime.logging import run_fields
from services.runtime.settings import KafkaSettings, LimitSettings

log = logging.getLogger(__name__)

Records = dict[TopicPartition, list[ConsumerRecord[Any, Any]]]


@dataclass(slots=True)
class Share:
    """One partition's batch (or bare offsets) waiting for, or riding, a transaction."""

    owned: Owned
    batch: Batch | None
    offsets: dict[TopicPartition, int]
    polled_at: float | None


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
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.topics = kafka.topics
        self.group_id = f"{kafka.topic_prefix}.gatekeeper"
        self.client_id = client_id
        self.clock = clock
        self.stats: Counter[str] = Counter()
        self.assigned = asyncio.Event()
        """Set once partitions are assigned and restored (tests wait on it)."""
        self._owned: dict[int, Owned] = {}
        self._producer: AIOKafkaProducer | None = None
        self._group: FencedGroup | None = None
        """The group id with the generation this instance joined, to fence its commits."""
        self._shares: list[Share] = []
        """Batches ready for the next transaction."""
        self._transaction: asyncio.Task[None] | None = None
        self._takeover: asyncio.Task[None] | None = None
        """Partitions being taken over (``assign``), outside the rebalance callback."""
        self._accepting = True
        """False while partitions are being handed back: no new transaction starts."""
        self._lock = asyncio.Lock()
        self._generation = 0
        self._fatal: BaseException | None = None
        self._agents = Agents(self.topics, settings.agents_refresh_s)
        self.heap = Heap(settings.gc_full_s)
        self._consumer: AIOKafkaConsumer | None = None
        self._joined = False
        self.telemetry = Telemetry(self.group_id, interval_s=settings.gauges_s,
                                   running_limit_s=settings.running_too_long_s)
        self.limits = Limits(RecordLimit(kafka.max_record_bytes), LimitSettings().limits)
        self.stall = StallWatch(settings.stall_s)
        """Owned partitions with input whose committed offsets stand still (``/readyz``)."""

    @property
    def ready(self) -> bool:
        """Readiness (``/readyz``): in the group, every partition assigned to it restored,
        none stalled (``failing``)."""
        consumer = self._consumer
        if consumer is None or not self._joined or self._fatal is not None:
            return False
        owns = {tp.partition for tp in consumer.assignment()} <= set(self._owned)
        return owns and not self.failing

    @property
    def failing(self) -> dict[str, str]:
        """The readiness checks failing now, by name (``partition-<p>``), saying why."""
        return {
            f"partition-{p}": f"input waiting, committed offsets unchanged for {waited:.0f} s"
            for p, waited in self.stall.stalled(time.monotonic()).items()
        }

    @property
    def partitions(self) -> list[int]:
        """The partition numbers this instance owns now."""
        return sorted(self._owned)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume, decide and commit until ``stop`` is set; then hand everything back."""
        shorten_commit_gap_backoff()
        self.heap.start()
        consumer = new_consumer(
            self.kafka,
            self.client_id,
            group_id=self.group_id,
            max_poll_records=self.settings.max_batch,
            session_timeout_ms=self.settings.session_timeout_ms,
        )
        consumer.subscribe([self.topics.requests, self.topics.events], listener=_Listener(self))
        self._consumer = consumer
        await consumer.start()
        try:
            await self._agents.refresh(consumer, force=True)
            while not stop.is_set():
                generation = self._generation
                epochs = {p: o.epoch for p, o in self._owned.items()}
                got = await consumer.getmany(
                    timeout_ms=5 if self._busy() else 100, max_records=self.settings.max_batch
                )
                async with self._lock:
                    self._raise_if_fatal()
                    if generation != self._generation:
                        self._read_again(self._owned.values())
                        continue
                    await self._route(got, epochs)
                    self._launch()
                    self._apply_backpressure()
                await self._agents.refresh(consumer)
                await self.telemetry.tick(consumer, self.clock())
                if self.stall.due(time.monotonic()):
                    seen = await progress(consumer, self._owned.values())
                    for p in self.stall.observe(seen, time.monotonic()):
                        log.error("partition %d has input but its offsets have not moved for "
                                  "%g s: not ready", p, self.settings.stall_s)
        finally:
            await self.settle_takeover()
            async with self._lock:
                self._accepting = False
                await self._settle()
                await self._release()
            await consumer.stop()
            self.heap.stop()
            self.telemetry.stopped()
            log.info("gatekeeper stopped", extra={"stats": dict(self.stats)})

    def _busy(self) -> bool:
        """True when routed records wait for a barrier or a linger: poll again soon.

        A partition whose only work is a commit in flight needs no polling: the
        commit launches the partition's next batch itself when it ends.
        """
        return any(o.held or o.inbox for o in self._owned.values())

    # -- one round -----------------------------------------------------------

    async def _route(self, got: Records, epochs: dict[int, int]) -> None:
        """Steps 1 and 3: file the polled records with their partitions, with barriers.

        Everything awaited (positions, the barrier offsets) is read first and
        the partitions are changed after, in one step, so a commit finishing
        meanwhile never sees records filed without their barrier.
        """
        consumer = self._require_consumer()
        positions = {p: await consumer.position(o.events) for p, o in self._owned.items()}
        asking = [
            o
            for tp, records in got.items()
            if tp.topic == self.topics.requests
            and (o := self._owned.get(tp.partition))
            and any(self._may_be_closing(o, r) for r in records if r.offset >= o.next_request)
        ]
        ends = await self._barriers(asking)
        stale: set[int] = set()
        for tp, records in got.items():
            owned = self._owned.get(tp.partition)
            if owned is None:
                continue
            if owned.epoch != epochs.get(owned.partition):
                stale.add(owned.partition)  # rewound while these were in flight
            elif tp.topic == self.topics.events:
                fresh_events = [r for r in records if r.offset >= owned.next_event]
                if fresh_events:
                    owned.inbox.extend(fresh_events)
                    owned.waiting_since = owned.waiting_since or time.monotonic()
            elif taken := [r for r in records if r.offset >= owned.next_request]:
                owned.held.extend(taken)
                owned.next_request = taken[-1].offset + 1
                owned.held_since = owned.held_since or time.monotonic()
                owned.waiting_since = owned.waiting_since or owned.held_since
                if owned.events in ends:
                    owned.barrier = max(owned.barrier or 0, ends[owned.events])
        for p, owned in self._owned.items():
            if owned.epoch == epochs.get(p) and p not in stale:
                owned.next_event = max(owned.next_event, positions[p])
        self._read_again(self._owned[p] for p in stale)

    def _launch(self) -> None:
        """Steps 2, 4, 5 for every partition with work and no batch in flight."""
        if self._group is None:  # refused by the group: wait for the next assignment
            return
        for owned in self._owned.values():
            self._prepare(owned)
        self._start_transaction()

    def _prepare(self, owned: Owned) -> None:
        """Apply p's inbox, decide its held requests if ``events`` caught up, queue the batch."""
        if owned.inflight is not None or not (owned.inbox or owned.held or owned.advanced()):
            return
        if self._lingering(owned):
            return
        owned.waiting_since = None
        self.limits = limits = self.limits.with_agents(self._agents.names)
        batch = Batch(owned.states, self.clock(), self.settings.policy, limits,
                      poison=owned.poison)
        for record in owned.inbox:
            batch.event(record)
        owned.inbox, owned.applied_event = [], owned.next_event
        polled_at = None
        if owned.held and self._caught_up(owned):
            for record in owned.held:
                batch.request(record)
            polled_at = owned.held_since
            owned.held, owned.barrier, owned.held_since = [], None, None
        if batch.has_output or (owned.advanced() and self._flush_due(owned)):
            owned.inflight = asyncio.get_running_loop().create_future()
            share = Share(owned, batch if batch.has_output else None, owned.offsets(), polled_at)
            self._shares.append(share)

    def _start_transaction(self) -> None:
        """Step 5: commit every queued batch in one transaction, unless one is in flight."""
        if self._transaction is not None or not self._shares:
            return
        shares, self._shares = self._shares, []
        if self._fatal is not None or self._group is None:  # nothing more is written
            for share in shares:
                share.owned.rewound()
                _done(share.owned)
                if self._fatal is None:
                    self._seek(share.owned)
            return
        self._transaction = asyncio.create_task(self._commit(shares))

    def _lingering(self, owned: Owned) -> bool:
        """True while a small backlog may still grow into a bigger, cheaper transaction."""
        if owned.waiting_since is None or self.settings.linger_ms == 0:
            return False
        if len(owned.inbox) + len(owned.held) >= self.settings.max_batch:
            return False
        return (time.monotonic() - owned.waiting_since) * 1000 < self.settings.linger_ms

    def _apply_backpressure(self) -> None:
        """Pause a topic partition whose routed backlog is too long; resume it when short."""
        consumer = self._require_consumer()
        limit = 2 * self.settings.max_batch
        paused = consumer.paused()
        for owned in self._owned.values():
            for tp, backlog in ((owned.requests, owned.held), (owned.events, owned.inbox)):
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
        """Step 3: the ``events`` offsets that newly polled requests must wait for."""
        if not asking or self.settings.events_wait_ms == 0:
            return {}
        ends: dict[TopicPartition, int] = await self._require_consumer().end_offsets(
            [o.events for o in asking]
        )
        return ends

    def _caught_up(self, owned: Owned) -> bool:
        if owned.barrier is None or owned.applied_event >= owned.barrier:
            return True
        waited_ms = (time.monotonic() - (owned.held_since or 0.0)) * 1000
        if waited_ms >= self.settings.events_wait_ms:
            self.stats["events_wait_expired"] += 1
            log.warning(
                "deciding requests before events p%d caught up (%d < %d)",
                owned.partition,
                owned.applied_event,
                owned.barrier,
            )
            return True
        return False

    def _flush_due(self, owned: Owned) -> bool:
        return time.monotonic() - owned.last_commit >= self.settings.offsets_flush_s

    async def _commit(self, shares: list[Share]) -> None:
        """Steps 5 and 6 for the queued batches of every partition, as one transaction."""
        try:
            records = [
                record
                for share in shares
                if share.batch is not None
                for record in outputs(self.topics, share.owned.partition, share.batch)
            ]
            offsets = {tp: o for share in shares for tp, o in share.offsets.items()}
            committed = shares
            try:
                await commit_outputs(self._require_producer(), records, offsets, self._fence(),
                                     deadline_s=self.settings.transaction_deadline_s)
            except Exception as exc:
                if isinstance(exc, StaleGenerationError) or is_fenced(exc):
                    committed = self._lost(shares, exc)
                elif not is_member(self._require_consumer(), self._fence()):
                    # the group moved on meanwhile: a new producer under this id could
                    # fence a successor that owns the same partitions now
                    committed = self._lost(shares, exc)
                else:
                    stalled = isinstance(exc, TransactionStalledError)  # no trace to show
                    log.error("transaction on partitions %s failed (%s); settling it",
                              [s.owned.partition for s in shares], exc, exc_info=not stalled)
                    self.stats["transactions_failed"] += 1
                    self.stats["transactions_stalled"] += stalled
                    committed = await self._recover(shares)
                    if isinstance(exc, RecordsRefusedError):  # dead-lettered when read again
                        log.error("inputs set aside: %s", set_aside(exc.records, self._owned))
            now = time.monotonic()
            for share in committed:
                share.owned.committed(share.offsets, share.batch)
                share.owned.last_commit = now
                self.telemetry.committed(share.owned.partition, share.batch, share.polled_at)
                if share.batch is not None:
                    self._count(share.batch)
            self.heap.settle()
            self.stats["transactions"] += 1
        except Exception as exc:  # a share may be half installed: memory is not Kafka's
            log.exception("installing a transaction's outcome failed; stopping")
            self._fatal = exc
        finally:
            for share in shares:
                _done(share.owned)
            self._transaction = None
        if self._accepting and self._group is not None:
            for owned in self._owned.values():
                self._prepare(owned)  # what arrived meanwhile, without waiting for a poll
        self._start_transaction()

    async def _settle(self) -> None:
        """Commit what is queued and wait for every transaction in flight to end."""
        while self._transaction is not None or self._shares:
            self._start_transaction()
            if self._transaction is not None:
                await asyncio.gather(self._transaction, return_exceptions=True)

    def _count(self, batch: Batch) -> None:
        for d in batch.decisions:
            self.stats[d.verdict] += 1
            log.debug(
                "%s %s: %s",
                d.verdict,
                d.code or "",
                d.message,
                extra=run_fields(d.thread_id, d.run_id, d.request_id),
            )
        self.stats["decisions"] += len(batch.decisions)
        self.stats["dead_letters"] += len(batch.dead_letters)
        for letter in batch.dead_letters:
            log.warning(
                "dead letter from %s p%d@%d: %s",
                letter.source_topic,
                letter.partition,
                letter.offset,
                letter.reason,
                extra={"code": letter.code},
            )

    def _lost(self, shares: list[Share], exc: Exception) -> list[Share]:
        """Another instance owns these partitions now: stop deciding until the group says.

        Either the group refused the offsets (this member's generation is
        over; the transaction aborted) or a newer producer took the
        transactional id (a successor with the same assignment; its
        ``init_transactions`` aborted or completed the transaction). Either
        way the successor decides from what Kafka holds, so every partition
        is rewound without asking Kafka, nothing more is decided, and the
        consumer rejoins; the next assignment restores everything. The
        producer is not replaced: that would fence the successor.
        """
        fenced = is_fenced(exc)
        log.warning("%s; rejoining the group", "the transactional id was taken over" if fenced
                    else exc)
        self.stats["transactions_fenced" if fenced else "transactions_refused"] += 1
        self._group = None
        for share in shares:
            share.owned.rewound()
            self._seek(share.owned)
        request_rejoin(self._require_consumer())
        return []

    async def _recover(self, shares: list[Share]) -> list[Share]:
        """Step 6 on failure: learn from Kafka what the transaction did (``settle``).

        Returns the shares it committed after all (the caller installs them);
        every other partition is back at what Kafka holds, and its records are
        read again from there.
        """
        await self._replace_producer()
        committed = []
        for share in shares:
            owned = share.owned
            settled = await settle(
                owned, share.offsets, self.kafka, self._require_consumer(), self.client_id
            )
            log.warning("the failed transaction on partition %d: %s", owned.partition,
                        settled.outcome)
            self.stats[f"transactions_{settled.outcome}"] += 1
            if settled.outcome == "committed":
                committed.append(share)
                continue
            if settled.states is not None:
                owned.states = settled.states
                owned.committed_request, owned.committed_event = settled.offsets
                self.telemetry.restored(owned.partition, settled.states)
            owned.rewound()
            self._seek(owned)
        return committed

    async def _replace_producer(self) -> None:
        """A new producer with the same id: its ``init_transactions`` settles the failed one."""
        old, self._producer = self._producer, None
        if old is not None:
            await stop_producer(old)  # a stuck or dead producer may never stop by itself
        self._producer = await start_producer(
            self.kafka, self.client_id, sorted(self._owned), retry=True
        )

    def _read_again(self, partitions: Iterable[Owned]) -> None:
        """Step 1's recovery: drop what was routed and undecided, and read it again."""
        for owned in partitions:
            owned.read_again_from(owned.offsets()[owned.requests], owned.applied_event)
            self._seek(owned)

    def _seek(self, owned: Owned) -> None:
        consumer = self._require_consumer()
        consumer.seek(owned.requests, owned.next_request)
        consumer.seek(owned.events, owned.next_event)

    # -- rebalancing ---------------------------------------------------------

    def assign(self, assigned: set[TopicPartition]) -> None:
        """On assignment: start taking the partitions over, in the background.

        aiokafka sends no heartbeat while a rebalance callback runs, and a
        takeover can outlast the session: the group's offsets become stable
        only once a transaction the last owner left open has ended (up to the
        transaction timeout, when the successor's transactional id does not
        fence it). Done inside the callback, that wait would cost the
        membership and hand the partitions round again. The member's
        generation is taken now, while it is the one that was assigned them.
        """
        try:
            group: FencedGroup | Exception = fenced_group(self._require_consumer())
        except Exception as exc:  # not a member any more: the next assignment comes soon
            group = exc
        previous = self._takeover
        self._takeover = asyncio.create_task(self._take_over(previous, assigned, group))

    async def settle_takeover(self) -> None:
        """Wait until a takeover in progress has ended (before giving partitions back)."""
        while (task := self._takeover) is not None:
            await asyncio.gather(task, return_exceptions=True)
            if self._takeover is task:  # not followed by another assignment meanwhile
                self._takeover = None

    async def _take_over(
        self,
        previous: asyncio.Task[None] | None,
        assigned: set[TopicPartition],
        group: FencedGroup | Exception,
    ) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        await self.acquire(assigned, group)

    async def acquire(self, assigned: set[TopicPartition], group: FencedGroup | Exception) -> None:
        """Fence, restore, position, before anything is decided (``assign``'s task).

        The loop may poll the new assignment while this runs (it is not
        blocked by the lock until it has records), so positions come from the
        group's committed offsets, not from the consumer, and the generation
        moves again at the end: that poll is dropped and read again.
        """
        async with self._lock:
            self._joined = True
            self._generation += 1
            self._accepting = False
            await self._settle()
            await self._release()  # normally empty: revocation came first
            self._accepting = True  # nothing is in flight: the new partitions start idle
            numbers = sorted({tp.partition for tp in assigned})
            if not numbers:
                return
            if isinstance(group, Exception):
                log.warning("assigned partitions %s but %s; waiting for the next assignment",
                            numbers, group)
                self._group = None
                return
            started = time.monotonic()
            consumer = self._require_consumer()
            try:
                self._group = group
                self._producer = await start_producer(self.kafka, self.client_id, numbers)
                positions = [
                    (TopicPartition(self.topics.requests, p), TopicPartition(self.topics.events, p))
                    for p in numbers
                ]
                committed = await committed_offsets(
                    consumer, [tp for pair in positions for tp in pair]
                )
                restored = await restore(self.kafka, numbers, f"{self.client_id}-restore")
                for p, (requests, events) in zip(numbers, positions, strict=True):
                    self._owned[p] = Owned(
                        p,
                        requests,
                        events,
                        restored[p],
                        committed[requests],
                        committed[events],
                        last_commit=time.monotonic(),
                    )
                    self.telemetry.restored(p, restored[p])
            except Exception as exc:
                self._fatal = exc
                log.exception("could not take over partitions %s", numbers)
                return
            finally:
                self._generation += 1
            self._read_again(self._owned.values())
            self.heap.freeze()  # the restored states stay: keep them out of every pass
            self.stats["takeovers"] += 1
            threads = sum(len(o.states) for o in self._owned.values())
            log.info(
                "assigned partitions %s: %d threads restored in %.0f ms",
                numbers,
                threads,
                (time.monotonic() - started) * 1000,
            )
            self.assigned.set()

    async def revoke(self) -> None:
        """On revocation: the takeover and the round in flight finish first, then hand back."""
        await self.settle_takeover()
        async with self._lock:
            self._generation += 1
            self._accepting = False
            await self._settle()
            await self._release()

    async def _release(self) -> None:
        """Commit offsets read past (when possible), stop the producer, forget all."""
        owned_all, self._owned = list(self._owned.values()), {}
        producer, self._producer = self._producer, None
        self.telemetry.released([o.partition for o in owned_all])
        advanced = {tp: n for o in owned_all if o.advanced() for tp, n in o.offsets().items()}
        if producer is not None and advanced and self._fatal is None and self._group is not None:
            try:
                await commit_outputs(producer, [], advanced, self._fence(),
                                     deadline_s=self.settings.transaction_deadline_s)
            except Exception:
                log.warning("could not commit offsets read past on release", exc_info=True)
        if producer is not None:
            await stop_producer(producer)
        if owned_all:
            log.info("released partitions %s", [o.partition for o in owned_all])

    def _require_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("the gatekeeper owns no partitions: no producer")
        return self._producer

    def _fence(self) -> FencedGroup:
        if self._group is None:
            raise RuntimeError("the gatekeeper has not joined its group")
        return self._group

    def _require_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("the gatekeeper consumer is not started")
        return self._consumer

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise RuntimeError("the gatekeeper cannot continue") from self._fatal


def _done(owned: Owned) -> None:
    """The partition's batch has ended (committed, rewound or dropped): it may start another."""
    if owned.inflight is not None and not owned.inflight.done():
        owned.inflight.set_result(None)
    owned.inflight = None


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands aiokafka's rebalance callbacks to the processor."""

    def __init__(self, processor: Processor) -> None:
        self._processor = processor

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._processor.revoke()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._processor.assign(assigned)
