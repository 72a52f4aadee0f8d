"""The notifier's loop: read ``threads``, deliver what changed, commit only what ended.

The notifier is its own consumer group (``<prefix>.notifier``) on the
compacted ``threads`` topic; each instance owns some partitions and keeps a
``Book`` for each (``services.notifier.book``). When a partition is assigned
it is paused, the group's committed offset and watermark are fetched, and
the partition is read from its beginning: records before the committed
offset are only remembered, then every change is notified. A partition the
group has never committed starts at its current end (a new notifier tells
of what happens from when it first joins, not of the topic's history) and
commits that start at once.

Delivery is at least once, in order per thread: a partition's notifications
are delivered one after another, in record order, each until it succeeds or
is dead-lettered (``deadletter`` topic, service ``notifier``, code
``webhook_failed``, the body as the letter's value), and only then is the
offset after the record committed, with the partition's expiry watermark as
the commit's metadata. A crash, a rebalance or a stop in between delivers
the same notifications again from the committed offset, with the same
delivery ids, so a receiver that remembers ids sees each once. Exactly once
is not promised: the receiver and Kafka share no transaction.

A dead webhook holds its partition up (that is what "in order" costs); so
that a long run of failing deliveries does not outlast the group's poll
interval, a batch stops being worked on after ``POLL_BUDGET_S`` and its
partitions are sought back to the first record not done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from contracts import DecodeError, ThreadState, decode, encode
from contracts.webhooks import WebhookEvent
from services.agui.jsdate import from_epoch_ms, to_epoch_ms
from services.kafka.clients import (
    AIOKafkaAdminClient,
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    KafkaError,
    TopicPartition,
    new_admin,
    new_consumer,
    new_producer,
)
from services.kafka.deadletters import Service, Source, fitting, letter_key
from services.kafka.sizing import RecordLimit
from services.notifier import metrics
from services.notifier.book import Book, commit_metadata, read_watermark
from services.notifier.delivery import Outcome, Webhook
from services.notifier.settings import NotifierSettings
from services.notifier.signing import DELIVERY_HEADER
from services.runtime.settings import KafkaSettings

__all__ = ["Notifier"]

log = logging.getLogger(__name__)

POLL_BUDGET_S = 60.0
"""Longest time one polled batch is worked on (the group's poll interval is 300 s)."""
FLUSH_S = 5.0
"""Offsets of records that notified nothing are committed at least this often."""
SERVICE: Service = "notifier"


@dataclass
class _Owned:
    """One assigned partition."""

    tp: TopicPartition
    book: Book
    resume_at: int
    """The committed offset: records before it are restored, not notified."""
    watermark_ms: int
    fresh: bool
    next_offset: int = 0
    held: bool = False
    """A delivery was left unfinished (stopping): nothing more may be committed."""
    committed: int = -1
    committed_at: float = field(default_factory=time.monotonic)


@dataclass
class _Clients:
    consumer: AIOKafkaConsumer
    producer: AIOKafkaProducer
    admin: AIOKafkaAdminClient
    webhook: Webhook


class Notifier:
    """Owns some ``threads`` partitions and notifies the webhook of their interrupts."""

    def __init__(self, kafka: KafkaSettings, settings: NotifierSettings,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.kafka = kafka
        self.settings = settings
        self.group = f"{kafka.topic_prefix}.notifier"
        self.topic = kafka.topics.threads
        self._clock = clock
        self._limit = RecordLimit(kafka.max_record_bytes)
        self._owned: dict[int, _Owned] = {}
        self._arriving: set[TopicPartition] = set()
        self._generation = 0
        self._joined = False

    @property
    def ready(self) -> bool:
        """Joined, and every owned partition restored."""
        return not self.failing

    @property
    def partitions(self) -> list[int]:
        """The ``threads`` partitions this instance owns now."""
        return sorted(self._owned)

    @property
    def failing(self) -> Mapping[str, str]:
        """Why not ready, by check."""
        if not self._joined:
            return {"group": f"not yet assigned partitions in {self.group}"}
        out = {f"partition-{tp.partition}": "assigned, not set up yet" for tp in self._arriving}
        out.update({f"partition-{p}": f"restoring up to offset {o.resume_at}"
                    for p, o in self._owned.items() if not o.book.active})
        return out

    async def run(self, stop: asyncio.Event) -> None:
        """Notify until ``stop`` is set; then commit what is done and leave the group."""
        s = self.settings
        c = _Clients(
            consumer=new_consumer(self.kafka, "agui-notifier", group_id=self.group,
                                  max_poll_records=s.max_batch,
                                  session_timeout_ms=s.session_timeout_ms),
            producer=new_producer(self.kafka, "agui-notifier-deadletter"),
            admin=new_admin(self.kafka, "agui-notifier-admin"),
            webhook=Webhook(s),
        )
        try:
            await c.producer.start()
            await c.admin.start()
            c.consumer.subscribe(topics=[self.topic], listener=_Listener(self, c.consumer))
            await c.consumer.start()
            while not stop.is_set():
                await self._take(c)
                batch = await c.consumer.getmany(timeout_ms=self._poll_ms(),
                                                 max_records=s.max_batch)
                if not await self._records(c, batch, stop):
                    break
                await self._restored(c)
                if not await self._tick(c, stop):
                    break
                await self._flush(c, force=False)
            await self._flush(c, force=True)
        finally:
            await c.consumer.stop()
            await c.webhook.aclose()
            await c.producer.stop()
            await c.admin.close()

    # -- assignment -----------------------------------------------------------------------

    def assigned(self, consumer: AIOKafkaConsumer, tps: set[TopicPartition]) -> None:
        """The group gave us ``tps``: paused until ``_take`` has set them up."""
        self._joined = True
        self._generation += 1
        self._arriving |= tps
        if tps:
            consumer.pause(*tps)

    def revoked(self, tps: set[TopicPartition]) -> None:
        """The group takes ``tps`` away: forget them (a delivery in flight commits nothing)."""
        self._generation += 1
        for tp in tps:
            self._owned.pop(tp.partition, None)
            self._arriving.discard(tp)

    async def _take(self, c: _Clients) -> None:
        """Fetch the committed offsets of the partitions just assigned and restore from 0."""
        if not self._arriving:
            return
        generation, tps = self._generation, sorted(self._arriving)
        try:
            committed = await c.admin.list_consumer_group_offsets(self.group, partitions=tps)
            ends: dict[TopicPartition, int] = await c.consumer.end_offsets(tps)
        except KafkaError as exc:  # the coordinator moving, a broker restarting: next round
            log.warning("committed offsets of %s not read (%s); trying again", tps, exc)
            await asyncio.sleep(0.5)
            return
        if generation != self._generation:
            return  # a rebalance meanwhile: the next round sets up what is ours then
        now_ms = to_epoch_ms(self._clock())
        for tp in tps:
            at = committed.get(tp)
            fresh = at is None or at.offset < 0
            if at is None or at.offset < 0:
                resume_at, watermark = ends.get(tp, 0), now_ms
            else:
                resume_at, watermark = at.offset, read_watermark(at.metadata) or 0
            self._owned[tp.partition] = _Owned(tp, Book(self.topic, tp.partition), resume_at,
                                               watermark, fresh)
            log.info("partition %d: restoring to offset %d (%s)", tp.partition, resume_at,
                     "new to the group" if fresh else "committed")
        await c.consumer.seek_to_beginning(*tps)
        c.consumer.resume(*tps)
        self._arriving.clear()

    async def _restored(self, c: _Clients) -> None:
        """Activate the partitions read up to their committed offset."""
        for owned in list(self._owned.values()):
            if not owned.book.active and await c.consumer.position(owned.tp) >= owned.resume_at:
                await self._activate(c, owned)

    async def _activate(self, c: _Clients, owned: _Owned) -> None:
        owned.book.activate(owned.watermark_ms)
        owned.next_offset = owned.resume_at
        log.info("partition %d: restored, %d open interrupts watched", owned.tp.partition,
                 owned.book.pending)
        if owned.fresh:
            await self._commit(c, owned)
        else:
            owned.committed = owned.resume_at

    # -- records and expiries -------------------------------------------------------------

    async def _records(self, c: _Clients, batch: Mapping[TopicPartition, list[ConsumerRecord]],
                       stop: asyncio.Event) -> bool:
        """Restore or notify each record in order; False when stopping."""
        polled = time.monotonic()
        for tp, records in batch.items():
            owned = self._owned.get(tp.partition)
            for record in records:
                if owned is None or self._owned.get(tp.partition) is not owned:
                    break
                if time.monotonic() - polled > POLL_BUDGET_S:
                    c.consumer.seek(tp, record.offset)
                    break
                parsed = self._parse(record)
                if parsed is None:
                    continue
                thread_id, state = parsed
                if not owned.book.active:
                    if record.offset < owned.resume_at:
                        owned.book.restore(thread_id, state)
                        continue
                    await self._activate(c, owned)
                record_at = from_epoch_ms(record.timestamp)
                events = owned.book.apply(thread_id, state, record_at)
                owned.next_offset = record.offset + 1
                if events and not await self._notify(c, owned, events, record.offset, stop):
                    if stop.is_set():
                        return False
                    break  # revoked meanwhile: its next owner notifies from the commit
        return True

    async def _tick(self, c: _Clients, stop: asyncio.Event) -> bool:
        """Move the clock of every partition read to its end; deliver what expired.

        A thread's expiries at a time, each committed with the watermark just short of
        the next deadline, and no longer than ``POLL_BUDGET_S`` in all: a burst of
        expiries meeting a failing webhook must not outlast the group's poll interval
        (the rest follow the next poll)."""
        now_ms = to_epoch_ms(self._clock())
        started = time.monotonic()
        for owned in list(self._owned.values()):
            if not owned.book.active or not await self._caught_up(c, owned.tp):
                continue
            while True:
                events = owned.book.advance(now_ms, most=1)
                if events and not await self._notify(c, owned, events, owned.next_offset,
                                                     stop):
                    return not stop.is_set()
                if not owned.book.due(now_ms):
                    break
                if time.monotonic() - started > POLL_BUDGET_S:
                    return True
        metrics.instruments().open_interrupts.set(
            sum(o.book.pending for o in self._owned.values()))
        return True

    async def _caught_up(self, c: _Clients, tp: TopicPartition) -> bool:
        """Every committed record of ``tp`` read (none waits that could answer in time)."""
        end = c.consumer.last_stable_offset(tp)
        if end is None:
            end = c.consumer.highwater(tp)
        return end is not None and await c.consumer.position(tp) >= end

    def _parse(self, record: ConsumerRecord) -> tuple[str, ThreadState | None] | None:
        if record.key is None:
            log.warning("threads record at %d/%d has no key: skipped", record.partition,
                        record.offset)
            return None
        thread_id = bytes(record.key).decode("utf-8", "replace")
        if record.value is None:
            return thread_id, None
        try:
            return thread_id, decode(ThreadState, record.value)
        except DecodeError as exc:
            log.warning("threads record at %d/%d does not decode (%s): skipped",
                        record.partition, record.offset, exc, extra={"threadId": thread_id})
            return None

    # -- delivery ---------------------------------------------------------------------------

    async def _notify(self, c: _Clients, owned: _Owned, events: list[WebhookEvent], offset: int,
                      stop: asyncio.Event) -> bool:
        """Deliver (or dead-letter) ``events`` in order, then commit; False if interrupted."""
        for event in events:
            outcome = await c.webhook.deliver(event, stop)
            if outcome is None:
                owned.held = True  # the next start delivers it again from the commit
                return False
            if self._owned.get(owned.tp.partition) is not owned:
                return False
            if outcome.delivered:
                log.info("webhook %s %s for thread %s delivered (%s, attempt %d)", event.kind,
                         event.delivery_id, event.thread_id, outcome.last, outcome.attempts,
                         extra={"threadId": event.thread_id, "runId": event.run_id})
            elif not await self._dead_letter(c, event, outcome, owned.tp.partition, offset, stop):
                owned.held = True
                return False
        await self._commit(c, owned)
        return True

    async def _dead_letter(self, c: _Clients, event: WebhookEvent, outcome: Outcome,
                           partition: int, offset: int, stop: asyncio.Event) -> bool:
        reason = (f"webhook {event.kind} notification not delivered after {outcome.attempts} "
                  f"attempts; last: {outcome.last}")
        source = Source(self.topic, partition, offset, event.thread_id.encode(), encode(event),
                        [(DELIVERY_HEADER, event.delivery_id.encode())])
        letter = fitting(source, "webhook_failed", reason, self._clock(), service=SERVICE,
                         limit=self._limit)
        wait = 0.5
        while True:
            try:
                await c.producer.send_and_wait(self.kafka.topics.deadletter, encode(letter),
                                               key=letter_key(letter))
                break
            except KafkaError as exc:
                log.warning("dead letter for %s not written (%s); retrying", event.delivery_id,
                            exc)
                await asyncio.sleep(wait)
                wait = min(wait * 2, 10)
                if stop.is_set():
                    return False
        metrics.dead_lettered(event.kind)
        log.error("webhook %s %s for thread %s dead-lettered: %s", event.kind, event.delivery_id,
                  event.thread_id, reason, extra={"threadId": event.thread_id})
        return True

    async def _commit(self, c: _Clients, owned: _Owned) -> None:
        if owned.held or self._owned.get(owned.tp.partition) is not owned:
            return
        offsets = {owned.tp: (owned.next_offset, commit_metadata(owned.book.watermark_ms))}
        try:
            await c.consumer.commit(offsets)
        except KafkaError as exc:  # a rebalance: the partition's next owner delivers again
            log.warning("partition %d: commit at %d refused (%s)", owned.tp.partition,
                        owned.next_offset, exc)
            return
        owned.committed = owned.next_offset
        owned.committed_at = time.monotonic()

    async def _flush(self, c: _Clients, *, force: bool) -> None:
        """Commit positions that moved without notifying, every ``FLUSH_S``."""
        now = time.monotonic()
        for owned in list(self._owned.values()):
            if owned.book.active and owned.next_offset > owned.committed and (
                    force or now - owned.committed_at >= FLUSH_S):
                await self._commit(c, owned)

    def _poll_ms(self) -> int:
        """Until the earliest deadline, at most ``AGUI_NOTIFIER_POLL_S``."""
        wait = self.settings.poll_s
        now = self._clock()
        for owned in self._owned.values():
            due = owned.book.next_deadline() if owned.book.active else None
            if due is not None:
                wait = min(wait, max((due - now).total_seconds(), 0.0))
        return max(int(wait * 1000), 10)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands aiokafka's rebalance callbacks to the notifier."""

    def __init__(self, notifier: Notifier, consumer: AIOKafkaConsumer) -> None:
        self._notifier = notifier
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._notifier.revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._notifier.assigned(self._consumer, assigned)
