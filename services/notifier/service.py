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
is not promised: the receiver and Kafka share no transaction. A dead letter
the broker refuses for its size is written minimal, and refused even so,
logged as an ERROR and skipped: never retried as it was, which would hold
its partition for ever. A ``threads`` record past ``AGUI_MAX_RECORD_BYTES``
(written compressed, the broker's limit may take it) is not read: it is
dead-lettered ``record_too_large`` and skipped, never decoded into a webhook
of its size.

Partitions are worked independently: the loop only polls, and hands each
partition's records to a task of its own (at most one per owned partition,
working its partition's records and expiries one after another, in record
order); a partition with a full batch waiting for its task is paused until
the task has worked it off. So a dead webhook holds up its own partition
only (that is what "in order" costs), and as the loop never waits for a
webhook it keeps polling however long a retry schedule lasts: the member is
not dropped from the group mid-delivery for outlasting the poll interval,
and every schedule ends in a delivery or a dead letter. A revoked
partition's task is cancelled (it commits nothing more); a stop lets every
task end the attempt in flight, then commits what ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
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
from services.kafka.deadletters import InRecord, Service, Source, letter_key
from services.kafka.lookup import wait_for_broker, wait_for_topics
from services.kafka.size_refusals import TOO_LARGE, letter_after, refused_reason
from services.kafka.sizing import RecordLimit
from services.notifier import metrics
from services.notifier.book import Book, commit_metadata, read_watermark
from services.notifier.delivery import Outcome, Webhook
from services.notifier.settings import NotifierSettings
from services.notifier.signing import DELIVERY_HEADER
from services.runtime import metrics as shared_metrics
from services.runtime.logging import run_fields
from services.runtime.settings import KafkaSettings

__all__ = ["Notifier"]

log = logging.getLogger(__name__)

FLUSH_S = 5.0
"""Offsets of records that notified nothing are committed at least this often."""
SERVICE: Service = "notifier"
WEBHOOK_FAILED = "webhook_failed"
RECORD_TOO_LARGE = "record_too_large"


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
    queue: deque[ConsumerRecord] = field(default_factory=deque)
    """Records polled, not yet worked by ``work``."""
    work: asyncio.Task[None] | None = None
    """The one task working this partition's records or expiries, if any."""
    paused: bool = False
    """Fetching stopped until ``work`` has worked a full ``queue`` off."""

    @property
    def idle(self) -> bool:
        return self.work is None


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
        if not await wait_for_broker(self.kafka, stop):  # not ready meanwhile
            return
        if not await wait_for_topics(self.kafka, [self.topic, self.kafka.topics.deadletter],
                                     stop):  # it exited, "not found in cluster metadata"
            return
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
                self._reap()
                for tp, records in batch.items():
                    owned = self._owned.get(tp.partition)
                    if owned is not None and records:
                        self._hand(c, owned, records, stop)
                await self._restored(c)
                await self._tick(c, stop)
                await self._flush(c, force=False)
            await _settle(o.work for o in list(self._owned.values()))
            self._reap()
            await self._flush(c, force=True)
        finally:
            await _settle((o.work for o in list(self._owned.values())), cancel=True)
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

    async def revoked(self, tps: set[TopicPartition]) -> None:
        """The group takes ``tps`` away: forget them, cancel their work (it commits nothing)."""
        self._generation += 1
        gone = [self._owned.pop(tp.partition, None) for tp in tps]
        self._arriving -= tps
        await _settle((o.work for o in gone if o is not None), cancel=True)

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
            if owned.idle and not owned.book.active and \
                    await c.consumer.position(owned.tp) >= owned.resume_at:
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

    # -- the partitions' work ---------------------------------------------------------------

    def _ours(self, owned: _Owned) -> bool:
        return self._owned.get(owned.tp.partition) is owned

    def _hand(self, c: _Clients, owned: _Owned, records: list[ConsumerRecord],
              stop: asyncio.Event) -> None:
        """Queue ``records`` for the partition's task, started if none runs. A partition
        with a batch waiting is paused (fetches nothing more) until its task has worked
        the queue off, so a held-up partition keeps no more than that in memory."""
        owned.queue.extend(records)
        if owned.idle:
            owned.work = asyncio.create_task(self._work(c, owned, None, stop))
        if len(owned.queue) >= self.settings.max_batch and not owned.paused:
            c.consumer.pause(owned.tp)
            owned.paused = True

    def _reap(self) -> None:
        """Forget the tasks that ended (raising what one raised)."""
        for owned in list(self._owned.values()):
            if owned.work is not None and owned.work.done():
                work, owned.work = owned.work, None
                work.result()

    async def _work(self, c: _Clients, owned: _Owned, expire_at: int | None,
                    stop: asyncio.Event) -> None:
        """A partition's one task: the expiries due at ``expire_at`` (if given), then every
        record queued meanwhile, in order, until stopped or revoked; then it fetches again.
        The queue is checked after the last wait, so no record handed to it is left."""
        if expire_at is not None and not await self._expire(c, owned, expire_at, stop):
            return
        while owned.queue:
            if stop.is_set() or not self._ours(owned):
                return
            if not await self._record(c, owned, owned.queue.popleft(), stop):
                return  # stopping, or revoked: the next owner notifies from the commit
        if owned.paused and self._ours(owned):
            c.consumer.resume(owned.tp)
            owned.paused = False

    async def _record(self, c: _Clients, owned: _Owned, record: ConsumerRecord,
                      stop: asyncio.Event) -> bool:
        """Restore or notify one record; False if its notification was interrupted."""
        if record.value is not None and len(record.value) > self.kafka.max_record_bytes:
            return await self._oversize(c, owned, record, stop)
        parsed = self._parse(record)
        if parsed is None:
            return True
        thread_id, state = parsed
        if not owned.book.active:
            if record.offset < owned.resume_at:
                owned.book.restore(thread_id, state)
                return True
            await self._activate(c, owned)
        events = owned.book.apply(thread_id, state, from_epoch_ms(record.timestamp))
        owned.next_offset = record.offset + 1
        return not events or await self._notify(c, owned, events, record.offset, stop)

    async def _tick(self, c: _Clients, stop: asyncio.Event) -> None:
        """Move the clock of every idle partition read to its end; deliver what expired."""
        now_ms = to_epoch_ms(self._clock())
        for owned in list(self._owned.values()):
            if not owned.idle or not owned.book.active or not await self._caught_up(c, owned.tp):
                continue
            if not owned.book.due(now_ms):
                owned.book.advance(now_ms)  # nothing due: only the clock moves
            elif self._ours(owned):
                owned.work = asyncio.create_task(self._work(c, owned, now_ms, stop))
        metrics.instruments().open_interrupts.set(
            sum(o.book.pending for o in self._owned.values()))

    async def _expire(self, c: _Clients, owned: _Owned, now_ms: int,
                      stop: asyncio.Event) -> bool:
        """A thread's expiries at a time, each committed with the watermark just short of
        the next deadline (a stop or a revocation in between repeats none that ended);
        False if one was interrupted."""
        while owned.book.due(now_ms):
            events = owned.book.advance(now_ms, most=1)
            if events and not await self._notify(c, owned, events, owned.next_offset, stop):
                return False
        return True

    async def _caught_up(self, c: _Clients, tp: TopicPartition) -> bool:
        """Every committed record of ``tp`` read (none waits that could answer in time)."""
        end = c.consumer.last_stable_offset(tp)
        if end is None:
            end = c.consumer.highwater(tp)
        return end is not None and await c.consumer.position(tp) >= end

    async def _oversize(self, c: _Clients, owned: _Owned, record: ConsumerRecord,
                        stop: asyncio.Event) -> bool:
        """A record past ``AGUI_MAX_RECORD_BYTES`` (written compressed, the broker's limit
        took it): never decoded, nor notified whole; dead-lettered ``record_too_large``
        (its value cut), then committed past. One before the committed offset was
        dead-lettered then: skipped. False if stopped before its letter was written."""
        if not owned.book.active:
            if record.offset < owned.resume_at:
                return True
            await self._activate(c, owned)
        owned.next_offset = record.offset + 1
        reason = (f"the threads record is {len(record.value or b'')} bytes, over the limit "
                  f"of {self.kafka.max_record_bytes} (AGUI_MAX_RECORD_BYTES): not read")
        kept = await self._dead_letter(c, record, RECORD_TOO_LARGE, reason, stop)
        if kept is None:
            owned.held = True
            return False
        if kept:
            log.error("threads record at %d/%d dead-lettered: %s", record.partition,
                      record.offset, reason)
        await self._commit(c, owned)
        return True

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
            elif not await self._undelivered(c, event, outcome, owned.tp.partition, offset,
                                             stop):
                owned.held = True
                return False
        await self._commit(c, owned)
        return True

    async def _undelivered(self, c: _Clients, event: WebhookEvent, outcome: Outcome,
                           partition: int, offset: int, stop: asyncio.Event) -> bool:
        """Dead-letter a notification given up; False if stopped first. One whose letter
        the broker refused even minimal is on no dead-letter topic: ``_dead_letter`` counts
        it lost and logs its one ERROR, and it is not counted dead-lettered."""
        reason = (f"webhook {event.kind} notification not delivered after {outcome.attempts} "
                  f"attempts; last: {outcome.last}")
        source = Source(self.topic, partition, offset, event.thread_id.encode(), encode(event),
                        [(DELIVERY_HEADER, event.delivery_id.encode())])
        kept = await self._dead_letter(c, source, WEBHOOK_FAILED, reason, stop)
        if kept is None:
            return False
        if kept:
            metrics.dead_lettered(event.kind)
            log.error("webhook %s %s for thread %s dead-lettered: %s", event.kind,
                      event.delivery_id, event.thread_id, reason,
                      extra={"threadId": event.thread_id})
        return True

    async def _dead_letter(self, c: _Clients, source: InRecord, code: str, reason: str,
                           stop: asyncio.Event) -> bool | None:
        """Write the letter about ``source``, retrying what may pass later: True once written,
        None if stopped first. A letter the broker refuses for its size is never sent again
        as it was (``size_refusals``): written minimal and, refused even so, given up (False)
        with an ERROR log naming the record and ``agui_dead_letters_lost_total``, so the
        partition moves on."""
        refusals, wait = 0, 0.5
        while (letter := letter_after(source, code, reason, self._clock(), service=SERVICE,
                                      limit=self._limit, refusals=refusals)) is not None:
            key, value = letter_key(letter), encode(letter)
            try:
                await c.producer.send_and_wait(self.kafka.topics.deadletter, value, key=key)
            except TOO_LARGE as exc:
                refused = refused_reason(self.kafka.topics.deadletter, key, value)
                log.warning("dead letter about %s p%d@%d refused (%s): %s", source.topic,
                            source.partition, source.offset, exc, refused)
                reason, refusals = f"{reason}; {refused}", refusals + 1
                continue
            except KafkaError as exc:
                log.warning("dead letter about %s p%d@%d not written (%s); retrying",
                            source.topic, source.partition, source.offset, exc)
                await asyncio.sleep(wait)
                wait = min(wait * 2, 10)
                if stop.is_set():
                    return None
                continue
            shared_metrics.dead_letter(SERVICE, code)
            return True
        shared_metrics.dead_letter_lost(SERVICE, code)
        thread = source.key.decode(errors="replace") if source.key else None  # threads' key
        log.error("%s p%d@%d (%s) could not be dead-lettered: the broker refused its letter "
                  "even minimal, so it is kept nowhere: %s", source.topic, source.partition,
                  source.offset, code, reason, extra=run_fields(thread))
        return False

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
            if owned.idle and owned.book.active and owned.next_offset > owned.committed and (
                    force or now - owned.committed_at >= FLUSH_S):
                await self._commit(c, owned)

    def _poll_ms(self) -> int:
        """Until an idle partition's earliest deadline, at most ``AGUI_NOTIFIER_POLL_S``."""
        wait = self.settings.poll_s
        now = self._clock()
        for owned in self._owned.values():
            due = owned.book.next_deadline() if owned.idle and owned.book.active else None
            if due is not None:
                wait = min(wait, max((due - now).total_seconds(), 0.0))
        return max(int(wait * 1000), 10)


async def _settle(works: Iterable[asyncio.Task[None] | None], *, cancel: bool = False) -> None:
    """Wait for the tasks to end (cancelled first with ``cancel``)."""
    tasks = [w for w in works if w is not None]
    for task in tasks if cancel else ():
        task.cancel()
    if tasks:
        await asyncio.wait(tasks)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands aiokafka's rebalance callbacks to the notifier."""

    def __init__(self, notifier: Notifier, consumer: AIOKafkaConsumer) -> None:
        self._notifier = notifier
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._notifier.revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._notifier.assigned(self._consumer, assigned)
