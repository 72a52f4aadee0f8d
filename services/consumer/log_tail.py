"""Reading a stream's run from the events topic while its client is behind the fan-out.

A stream whose buffer filled (``overflow``) is not cut: once its client has
drained the buffer, ``LogTail.follow`` reads the run's records itself, with a
group-less consumer of its own on the run's partition, from the first offset
the stream did not buffer. It reads one batch, hands it to the stream's body
(which sends it at the client's pace: nothing more is fetched meanwhile), and
after each batch tells the stream's ``StreamLag`` how far it got; when that
says the reader is past everything the fan-out routed, the stream is back on
the fan-out and the reader stops.

Bounded per instance: at most ``AGUI_STREAM_LOG_READERS`` readers at once
(each is a Kafka consumer holding at most one fetch of one partition), shared
with the replays' scans (``replay``), which read in turns as streams do and
whose first turn waits ``SLICE_S`` and a tick at most, then ``503
replay_busy`` (three hundred replays by clients that read nothing had held
as many consumers, and their decoding froze the instance for every other
client). A
stream that falls behind while all are taken waits for one, first come first
served, sending keep-alives; its client gets nothing new meanwhile, and
nothing is buffered for it beyond its full queue (already sent by then). A
reader is released when its stream rejoins the fan-out, reaches the run's end
or closes (client gone, or disconnected by ``AGUI_STREAM_IDLE_S``), and, while
another waits, after ``SLICE_S`` of holding it: at the next record its client
takes, the holder gives the reader up and waits in line again from where it
stopped. A holder whose client takes nothing for ``SLICE_S`` after that (it
reads nothing at all: its body is parked on a write) has the reader taken
from it by the next waiter's tick (``Turn.revoke``: the slot returned, the
consumer stopped, the rest of its fetch let go); when its client reads
again it waits in line from the record after the last one it was handed. So
a wait lasts at most about two slices per holder ahead of it, whatever the
holders' clients do.

A reader finding the offset it resumes from removed from the log (retention,
delete-records: the records the stream did not buffer are gone) raises
``EventsGone`` instead of going on from the partition's first offset (its
consumer resets nothing, ``auto_offset_reset="none"``): the body breaks the
connection off, and the client, seeing no end, asks again with
``Last-Event-ID`` and is answered ``410 events_expired`` (``replay``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from contracts.headers import EVENT_TYPE, RUN_ID, SEQ, ascii_int, header_value
from services.consumer.lookback import BUSY_RETRY_AFTER_S
from services.consumer.metrics import ConsumerMetrics
from services.consumer.problems import RetryLater
from services.consumer.streams import Delivery, RunStream
from services.kafka.clients import (
    AIOKafkaConsumer,
    ConsumerRecord,
    OffsetOutOfRangeError,
    TopicPartition,
    new_consumer,
)
from services.kafka.metadata import partition_counts
from services.kafka.partitioning import hashed_among, partition_for
from services.runtime.logging import run_fields
from services.runtime.settings import KafkaSettings

if TYPE_CHECKING:
    from services.consumer.sse import StreamOutcome

log = logging.getLogger(__name__)

TICK_S = 1.0
"""A reader waiting for a slot or for records yields ``None`` this often (keep-alive ticks)."""
BATCH = 500
"""Records fetched per read: what one stream may hold of the log at a time."""
SLICE_S = 5.0
"""How long a reader is held before it goes to the next in line, when one waits: a
client reading steadily but slowly (4 KiB/s) held its reader until its run was read and
stalled every other stream behind the fan-out for as long (found by probing)."""


class EventsGone(Exception):  # noqa: N818 - what happened, as ``NothingLeft``
    """The records a stream behind the fan-out was to read next are no longer on the log."""


def run_delivery(record: ConsumerRecord, key: bytes, run_id: str) -> Delivery | None:
    """The record as a delivery of the run (thread ``key``, ``run_id``); None for any
    other record (another thread or run, no sequence number, or a tombstone)."""
    if record.key != key or record.value is None or header_value(record.headers,
                                                                 RUN_ID) != run_id:
        return None
    seq = ascii_int(header_value(record.headers, SEQ), signed=True)
    if seq is None:
        return None
    return Delivery(seq, header_value(record.headers, EVENT_TYPE) or "", record.value,
                    record.offset)


class Turn:
    """One hold of a reader: due once it has been held ``SLICE_S`` while others wait, and
    revoked (``revoke``) when its holder then takes no step for ``SLICE_S`` more.

    The holder calls ``step`` after each item its client took (a record or a tick), and
    ``release`` once, however it ends: a revoked turn's slot went back at revocation.
    """

    __slots__ = ("client", "consumer", "given_up", "last_step", "parked", "records",
                 "released", "revoked", "since", "tail", "unsent_seen")

    def __init__(self, tail: LogTail, client: StreamOutcome | None = None) -> None:
        self.tail = tail
        self.client = client
        """The response the holder feeds: its ``unsent`` bytes, when the server tells
        them, show a client reading slowly (they fall) from one reading nothing."""
        self.unsent_seen = sys.maxsize
        self.since = self.last_step = asyncio.get_running_loop().time()
        self.given_up = False
        self.parked = False
        """The holder is suspended handing an item to its client (only then is it revoked:
        anywhere else it may be inside a call on its consumer)."""
        self.revoked = False
        self.released = False
        self.consumer: AIOKafkaConsumer | None = None
        """The holder's consumer, stopped by ``revoke``."""
        self.records: list[ConsumerRecord] | None = None
        """The holder's current fetch, let go by ``revoke``."""
        tail.held.add(self)

    def due(self) -> bool:
        return (self.tail.waiting > 0
                and asyncio.get_running_loop().time() - self.since >= SLICE_S)

    def park(self) -> None:
        """The holder is about to hand its client an item (``step`` once it was taken)."""
        self.parked = True

    def step(self) -> bool:
        """The holder's client took an item; True when the turn was revoked meanwhile
        (the holder stops at once, without another call on its consumer)."""
        self.parked = False
        self.last_step = asyncio.get_running_loop().time()
        return self.revoked

    def stalled(self, now: float) -> bool:
        """Due, parked, and its client has taken nothing for ``SLICE_S``: no step, and no
        fewer bytes unsent at any look since (a client reading slowly takes bytes every
        second or so, while its holder may stay parked on one write for many seconds)."""
        if not self.parked or not self.due():
            return False
        unsent = self.client.unsent if self.client is not None else None
        if unsent is not None:
            left = unsent()
            if left < self.unsent_seen:
                self.last_step = now
            self.unsent_seen = left
        return now - self.last_step >= SLICE_S

    def give_up(self, stream: RunStream | None = None) -> None:
        """The reader goes to the next in line; the holder waits for another."""
        self.given_up = True
        if self.revoked:
            return
        self.tail.metrics.log_turns_given_up.inc()
        if stream is not None:
            log.debug("stream of run %s gives its log reader up to the next in line",
                      stream.run_id, extra=run_fields(stream.thread_id, stream.run_id))

    def revoke(self) -> None:
        """Take the reader from a holder whose client reads nothing: its slot goes to the
        next in line now, its consumer is stopped and its fetch dropped."""
        self.revoked = True
        self.tail.metrics.log_turns_revoked.inc()
        if self.records is not None:
            self.records.clear()  # the holder's loop over it ends at its next step
        if self.consumer is not None:
            self.tail.stopping(self.consumer)
        self.release()

    def release(self) -> None:
        """Return the reader (once: a revoked turn's went back at revocation)."""
        if not self.released:
            self.released = True
            self.tail.held.discard(self)
            self.tail.give()


class LogTail:
    """The instance's readers for streams that fell behind (see the module docstring)."""

    def __init__(self, kafka: KafkaSettings, metrics: ConsumerMetrics, readers: int) -> None:
        self.kafka = kafka
        self.metrics = metrics
        self.readers = readers
        self.slots = asyncio.Semaphore(readers)
        self.active = 0
        self.waiting = 0
        """Streams and replays waiting for a reader now (what makes a turn come due)."""
        self.peak = 0
        """The most readers open at once since startup (at most ``readers``)."""
        self._partitions: int | None = None
        self.held: set[Turn] = set()
        """The turns holding a reader now (``Turn.revoke`` looks at them)."""
        self._stopping: set[asyncio.Task[None]] = set()

    def stopping(self, consumer: AIOKafkaConsumer) -> None:
        """Stop a revoked holder's consumer in the background (its holder is parked)."""
        task = asyncio.create_task(consumer.stop(), name="consumer-revoked-stop")
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def revoke_stalled(self) -> None:
        """Revoke every turn whose client stopped taking records while others wait."""
        now = asyncio.get_running_loop().time()
        for turn in [t for t in self.held if t.stalled(now)]:
            log.info("a log reader is taken from a client that reads nothing, for the next "
                     "in line")
            turn.revoke()

    def fell_behind(self, stream: RunStream) -> None:
        """Count and log a stream whose buffer just filled (called by the stream)."""
        self.metrics.streams_to_log.inc()
        log.info("stream of run %s continues from the log: client reads slower than the "
                 "run streams (%d events buffered)", stream.run_id, len(stream.buffer),
                 extra=run_fields(stream.thread_id, stream.run_id))

    async def follow(self, stream: RunStream, client: StreamOutcome | None = None
                     ) -> AsyncGenerator[Delivery | None, None]:
        """The run's records from where the stream stopped buffering, until it rejoins the
        fan-out (or the caller stops at the run's end); ``None`` now and then as a tick.
        A turn that comes due (``Turn``) gives its reader up and waits for the next."""
        while True:
            async for tick in self.turn():
                yield tick
            held = Turn(self, client)
            try:
                async for item in self._read(stream, held):
                    yield item
            finally:
                held.release()
            if not held.given_up:
                return

    async def turn(self) -> AsyncGenerator[None, None]:
        """Wait for a reader, first come first served, yielding a ``None`` tick every
        ``TICK_S`` meanwhile; once it ends the caller holds one and must ``give`` it."""
        if self.slots.locked():
            self.metrics.stream_log_waiting.inc()
            self.waiting += 1
            try:
                while True:
                    try:
                        async with asyncio.timeout(TICK_S):
                            await self.slots.acquire()
                        break
                    except TimeoutError:
                        self.revoke_stalled()
                        yield None
            finally:
                self.waiting -= 1
                self.metrics.stream_log_waiting.dec()
        else:
            await self.slots.acquire()  # free: returns without waiting
        self._taken()

    async def take_soon(self) -> None:
        """A reader for a request not yet answered (a replay's scan), waited for up to
        ``SLICE_S`` and a tick (the turns of the streams holding them come due meanwhile),
        or ``503 replay_busy``: the client would wait with no head at all."""
        ticks, waited = self.turn(), 0.0
        try:
            async for _ in ticks:
                waited += TICK_S
                if waited > SLICE_S:
                    self.metrics.replays_busy.inc()
                    raise RetryLater("replay_busy", f"all {self.readers} of this instance's "
                                     "log readers are in use; ask again later",
                                     BUSY_RETRY_AFTER_S)
        finally:
            await ticks.aclose()

    def _taken(self) -> None:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.metrics.stream_log_readers.inc()

    def give(self) -> None:
        """Return a reader taken by ``turn`` or ``take_soon``."""
        self.active -= 1
        self.metrics.stream_log_readers.dec()
        self.slots.release()

    async def _read(self, stream: RunStream,
                    turn: Turn) -> AsyncGenerator[Delivery | None, None]:
        lag = stream.lag
        topic = self.kafka.topics.events
        tp = TopicPartition(topic, partition_for(stream.thread_id, await self._count(topic)))
        consumer = turn.consumer = new_consumer(self.kafka, "agui-consumer-catchup",
                                                group_id=None, auto_offset_reset="none",
                                                max_poll_records=BATCH)
        try:
            await consumer.start()  # in the try: a client leaving now stops it too
            consumer.assign([tp])
            consumer.seek(tp, lag.resume_at)
            key = stream.thread_id.encode("utf-8")
            while True:
                try:
                    batch = await consumer.getmany(tp, timeout_ms=int(TICK_S * 1000),
                                                   max_records=BATCH)
                except OffsetOutOfRangeError:
                    raise EventsGone(f"{tp.topic} partition {tp.partition} no longer holds "
                                     f"offset {lag.resume_at} of run {stream.run_id!r} "
                                     "(retention removed it)") from None
                records = turn.records = batch.get(tp, [])
                for record in records:
                    delivery = run_delivery(record, key, stream.run_id)
                    if delivery is None:
                        continue
                    turn.park()
                    yield delivery
                    if turn.step() or turn.due():  # no await since the yield: the fan-out
                        if self._rejoined(stream, record.offset + 1):  # feeds from here
                            return
                        turn.give_up(stream)
                        return
                position = await consumer.position(tp)
                if self._rejoined(stream, position):  # no await between: as above
                    return
                if not records:
                    turn.park()
                    yield None
                    if turn.step():
                        turn.give_up(stream)
                        return
        finally:  # shielded: a client leaving now must not leave the consumer open
            turn.records = turn.consumer = None
            await asyncio.shield(consumer.stop())

    def _rejoined(self, stream: RunStream, position: int) -> bool:
        """Tell the stream's lag the reader is at ``position``; True when it rejoined."""
        if not stream.lag.read_to(position):
            return False
        self.metrics.streams_rejoined.inc()
        log.info("stream of run %s rejoined the live fan-out", stream.run_id,
                 extra=run_fields(stream.thread_id, stream.run_id))
        return True

    async def _count(self, topic: str) -> int:
        if self._partitions is None:
            count = (await partition_counts(self.kafka, (topic,)))[topic]
            self._partitions = hashed_among(self.kafka.partitions, count)
        return self._partitions
