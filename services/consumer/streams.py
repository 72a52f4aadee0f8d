"""Run fan-out: one reader of ``decisions`` and ``events`` per instance.

The instances form one consumer group over both topics (``ownership``: the
group assignor, every instance told who owns which partition); each reads
only the partitions it owns, starting from their end offsets when they are
assigned (``handover``: a partition lost in a rebalance is read on for the
streams still open on it), and routes each record to whoever on this
instance waits for it: a decision to the waiters registered under its
(threadId, requestId) (a client may choose its request id,
``forward.arrived_as``, and one id on two threads is two requests), an
event to the streams subscribed to its (threadId, runId) — threadId is the
record key, runId the ``agui-run-id`` header, so no event value is decoded
here. A request's waiter and its run's
stream are registered *before* the request is published, so whatever
arrives early is buffered in them.

Bounded everywhere: at most ``max_streams`` subscriptions, each with a
queue bounded in events and in bytes (``stream_queue``, ``stream_bytes``). A
stream whose client reads too slowly fills its queue; it then continues
from the log (``overflow``, ``log_tail``: the fan-out only notes what it
routes for it until it catches up) instead of stalling the
router and every other stream; with no ``tail`` set it is dropped (error
log, ``streams_dropped`` metric). Alongside routing, the reader remembers, in
bounded LRU maps, where each run it saw begins (so a replay seeks instead of
scanning), which runs were admitted (so a cancel for a run the thread
view has not caught up with yet is not refused) and how each run ended (its
terminal event, so ``GET /threads/{id}`` answers no state from before an end
a client has read: ``freshness``, which also asks ``reach_end`` to wait until
this reader has read a thread's partition up to its end).

Partitions added to a topic after startup are not read until restart.
Requests for a thread whose partition another instance owns never get here:
``forward`` sends them to the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

import orjson
from pydantic import ValidationError

from contracts import Decision
from contracts.headers import AGENT, EVENT_TYPE, RUN_ID, SEQ, header_value
from services.consumer.catchup import KEPT_BYTES, Ending
from services.consumer.handover import Batch, Handover, Linger, advanced
from services.consumer.mailbox import Mailbox
from services.consumer.metrics import ConsumerMetrics
from services.consumer.ordering import TERMINAL_TYPES
from services.consumer.overflow import StreamLag
from services.consumer.ownership import Ownership
from services.consumer.problems import RetryLater
from services.consumer.reading import BackgroundReader, Progress, wait_for_partitions
from services.kafka.assignor import OwnersAssignor
from services.kafka.clients import (
    ConsumerRecord,
    KafkaError,
    TopicPartition,
    new_consumer,
)
from services.kafka.partitioning import hashed_among, partition_for
from services.runtime.logging import run_fields
from services.runtime.settings import KafkaSettings

if TYPE_CHECKING:
    from services.consumer.log_tail import LogTail

log = logging.getLogger(__name__)

ENDINGS_KEPT = 8_192
"""Run ends remembered (each value at most ``catchup.KEPT_BYTES``: 128 MiB at the very
worst, a few MiB with real outcomes). A read needs an end only until the gatekeeper's
state for it is in the view, a few tens of milliseconds: thousands of runs ending."""
POSITION_POLL_S = 0.01
"""``reach_end`` looks at the reader's position at least this often (it can pass a
transaction marker without handing over a batch)."""
STREAMS_RETRY_AFTER_S = 5
"""``Retry-After`` of a ``too_many_streams`` refusal (the inbox feed's too)."""
SESSION_TIMEOUT_MS = 6_000
"""How long the group waits for a silent instance before handing its partitions on (the
broker's lowest default; a killed instance's threads wait this long for a new owner)."""


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@functools.lru_cache(maxsize=64)
def _type_name(raw: bytes) -> str:
    """An ``agui-event-type`` header decoded (a few names, each decoded once)."""
    return raw.decode("utf-8", "replace")


K = TypeVar("K")
V = TypeVar("V")
RunKey = tuple[str, str]
"""(threadId, runId): runIds are unique per thread only."""
RequestKey = tuple[str, str]
"""(threadId, requestId): a request id names a request on one thread only."""


class LruMap(Generic[K, V]):
    """A dict that forgets its least recently written entries beyond ``size``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def put(self, key: K, value: V) -> None:
        if self.size <= 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.size:
            self._data.popitem(last=False)

    def setdefault(self, key: K, value: V) -> None:
        if key not in self._data:
            self.put(key, value)

    def get(self, key: K) -> V | None:
        return self._data.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)


_new_tuple = tuple.__new__


class Delivery(NamedTuple):
    """One event record for a stream: its sequence number, type and raw value (a tuple:
    one is made per event and stream, and a frozen dataclass costs four times as much)."""

    seq: int
    event_type: str
    value: bytes
    offset: int = -1


def delivery_bytes(delivery: Delivery) -> int:
    """What a delivery weighs in a stream's buffer: its value."""
    return len(delivery.value)


@dataclass(eq=False)
class RunStream:
    """A subscription to one run's events, with a bounded buffer."""

    key: RunKey
    buffer: Mailbox[Delivery]
    dropped: bool = False
    tail: LogTail | None = None
    """Where the stream reads its run once behind; without one, a full buffer drops it."""
    lag: StreamLag = field(default_factory=StreamLag)
    partition: int = -1

    @property
    def thread_id(self) -> str:
        return self.key[0]

    @property
    def run_id(self) -> str:
        return self.key[1]

    def push_all(self, deliveries: list[Delivery], nbytes: int = -1) -> bool:
        """Buffer deliveries (in offset order; ``nbytes`` their values' bytes, when known),
        and leave the rest to the log once behind (``overflow``); False (and marked
        dropped) when the buffer is full and there is no log to continue from."""
        if self.dropped:
            return False
        if not self.lag.behind:
            buffered = self.buffer.put_all(deliveries, nbytes)
            if buffered == len(deliveries):
                return True
            if self.tail is None:
                self.dropped = True
                self.buffer.wake()
                return False
            self.lag.fall_behind(deliveries[buffered].offset)
            self.tail.fell_behind(self)
            self.buffer.wake()  # an empty buffer's reader would wait out a keep-alive
        self.lag.note(deliveries[-1].offset)
        return True


@dataclass(eq=False)
class DecisionWaiter:
    """Collects the decisions for one requestId (``queued`` may precede the final one)."""

    request_id: str
    decisions: Mailbox[Decision] = field(default_factory=lambda: Mailbox(16))
    partition: int = -1
    run: RunKey = ("", "")

    @property
    def key(self) -> RequestKey:
        return self.run[0], self.request_id

    async def next(self, within_s: float) -> Decision:
        """The next decision; TimeoutError after ``within_s`` seconds."""
        if not await self.decisions.wait(within_s):
            raise TimeoutError
        return self.decisions.take()


class FanOut(BackgroundReader):
    """Reads decisions and events from the end and routes them to local waiters."""

    name = "fanout"

    def __init__(self, kafka: KafkaSettings, metrics: ConsumerMetrics, *,
                 max_streams: int, stream_queue: int, index_size: int,
                 stream_bytes: int = 0, url: str = "") -> None:
        super().__init__(kafka)
        self.metrics = metrics
        self.tail: LogTail | None = None
        """Where streams that fall behind continue from (``log_tail``; set by the relay)."""
        self.max_streams = max_streams
        self.stream_queue = stream_queue
        self.stream_bytes = stream_bytes
        """Bytes of event values buffered per stream (0: bounded in events only)."""
        self.run_starts: LruMap[RunKey, tuple[int, int]] = LruMap(index_size)
        """(threadId, runId) → (partition, offset) of the first record seen of that run."""
        self.admitted: LruMap[RunKey, int] = LruMap(max(index_size, 1024))
        """(threadId, runId) → when its admission was written (the decision record's
        timestamp, epoch ms), for runs this instance saw admitted."""
        self.ended: LruMap[RunKey, Ending] = LruMap(ENDINGS_KEPT)
        """(threadId, runId) → the run's terminal event, for runs this instance saw end."""
        self.last_ended: LruMap[str, str] = LruMap(ENDINGS_KEPT)
        """threadId → the run whose end this instance read last."""
        self.progress = Progress()
        self.ready = asyncio.Event()
        self.partitions: dict[str, int] = {}
        self._streams: dict[RunKey, set[RunStream]] = {}
        self._stream_count = 0
        self._waiters: dict[RequestKey, set[DecisionWaiter]] = {}
        """(threadId, requestId) → the waiters for its decisions (two POSTs of one request
        at once each get them)."""
        self._deciding: Counter[RunKey] = Counter()
        """(threadId, runId) → requests of that run this instance awaits a decision for."""
        self._decided: dict[RunKey, asyncio.Event] = {}
        """Set once such a run is admitted or no request of it awaits a decision any more
        (``decided`` waits on it: no polling, however many wait)."""
        self.ownership = Ownership(url)
        """What this instance owns and who owns the rest (``url``: its advertised URL)."""
        self.positions: dict[TopicPartition, int] = {}
        """Where the group consumer has routed each owned partition up to."""
        self._load: dict[int, int] = {}
        """Partition → open streams and decision waiters on it (``busy``)."""
        self.linger = Linger(kafka, self._route, self.busy)

    # ------------------------------------------------------------ registration

    @property
    def stream_count(self) -> int:
        return self._stream_count

    def subscribe(self, thread_id: str, run_id: str) -> RunStream:
        """Start buffering the run's events; raises ``RetryLater`` when full."""
        if self._stream_count >= self.max_streams:
            self.metrics.streams_dropped.labels("too_many_streams").inc()
            raise RetryLater("too_many_streams",
                             f"this instance already serves {self.max_streams} streams",
                             STREAMS_RETRY_AFTER_S)
        stream = RunStream((thread_id, run_id),
                           Mailbox(self.stream_queue, self.stream_bytes, delivery_bytes),
                           tail=self.tail, partition=self._hold(thread_id))
        self._streams.setdefault(stream.key, set()).add(stream)
        self._stream_count += 1
        self.metrics.streams_open.inc()
        return stream

    def unsubscribe(self, stream: RunStream) -> None:
        """Stop routing to ``stream`` (idempotent)."""
        subs = self._streams.get(stream.key)
        if subs is None or stream not in subs:
            return
        subs.discard(stream)
        if not subs:
            del self._streams[stream.key]
        self._release(stream.partition)
        self._stream_count -= 1
        self.metrics.streams_open.dec()

    def expect(self, request_id: str, thread_id: str, run_id: str) -> DecisionWaiter:
        """Register a waiter for the decisions of ``request_id`` on ``thread_id`` (whose
        partition it holds)."""
        run = (thread_id, run_id)
        waiter = DecisionWaiter(request_id, partition=self._hold(thread_id), run=run)
        self._waiters.setdefault(waiter.key, set()).add(waiter)
        self._deciding[run] += 1
        self._decided.setdefault(run, asyncio.Event())
        return waiter

    def forget(self, waiter: DecisionWaiter) -> None:
        """Stop routing to ``waiter`` (idempotent)."""
        waiters = self._waiters.get(waiter.key)
        if waiters is not None and waiter in waiters:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[waiter.key]
            self._release(waiter.partition)
            self._deciding[waiter.run] -= 1
            if self._deciding[waiter.run] <= 0:
                del self._deciding[waiter.run]
                self._decided.pop(waiter.run).set()

    async def decided(self, key: RunKey, within_s: float) -> bool:
        """Whether the run is known admitted here, waiting up to ``within_s`` while a
        request of it posted to this instance still awaits its decision (a cancel
        sent right after the run, before the decision is read, is then not a 404)."""
        settled = self._decided.get(key)
        if settled is not None and key not in self.admitted:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(settled.wait(), within_s)
        return key in self.admitted

    def partition_of(self, thread_id: str) -> int:
        """The thread's partition of ``events`` (and of ``decisions``: co-partitioned)."""
        count = self.partitions.get(self.kafka.topics.events) or self.kafka.partitions
        return partition_for(thread_id, hashed_among(self.kafka.partitions, count))

    def busy(self) -> set[int]:
        """The partitions on which something on this instance waits (``handover``)."""
        return {p for p, n in self._load.items() if n > 0}

    def _hold(self, thread_id: str) -> int:
        partition = self.partition_of(thread_id)
        self._load[partition] = self._load.get(partition, 0) + 1
        return partition

    def _release(self, partition: int) -> None:
        left = self._load.get(partition, 0) - 1
        if left > 0:
            self._load[partition] = left
        else:
            self._load.pop(partition, None)

    # ------------------------------------------------------------ reading

    async def _run(self) -> None:
        topics = self.kafka.topics
        names = (topics.decisions, topics.events)
        self.partitions = await wait_for_partitions(self.kafka, names)
        handover: Handover | None = None

        def told(owners: tuple[str, ...]) -> None:
            if handover is not None:
                handover.told(owners)

        assignor = OwnersAssignor(self.ownership.url, told)
        consumer = await self._start_consumer(lambda: new_consumer(
            self.kafka, "agui-consumer-fanout", group_id=f"{self.kafka.topic_prefix}.consumer",
            auto_offset_reset="latest", max_poll_records=2000,
            session_timeout_ms=SESSION_TIMEOUT_MS, assignors=(assignor,)))
        handover = Handover(consumer, self.ownership, self.linger, self.positions, self.busy,
                            topics.events, self.ready.set)
        consumer.subscribe(list(names), listener=handover)
        log.info("fan-out joining the consumer-service group over %s and %s as %s",
                 topics.decisions, topics.events, self.ownership.url or "(unadvertised)")
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=1000, max_records=2000)
            except KafkaError as exc:
                log.warning("fan-out fetch failed, retrying: %s", exc)
                await asyncio.sleep(0.5)
                continue
            self._route(batch)
            advanced(self.positions, batch)

    async def stop(self) -> None:
        await self.linger.stop()
        await super().stop()

    def _route(self, batch: Batch) -> None:
        """Route one batch of either reader (the group's or ``Linger``'s)."""
        decisions = self.kafka.topics.decisions
        for tp, records in batch.items():
            if tp.topic == decisions:
                for record in records:
                    self._on_decision(record)
                self.metrics.records_routed.labels("decisions").inc(len(records))
            else:
                self._on_events(tp.partition, records)
                self.metrics.records_routed.labels("events").inc(len(records))
        if batch:
            self.progress.moved()

    async def reach_end(self, thread_id: str, deadline: float) -> bool:
        """Wait until this reader has read the thread's events partition up to the end
        it has now (one ListOffsets); False when ``deadline`` (the loop's clock) comes first."""
        consumer = self._consumer
        topic = self.kafka.topics.events
        if consumer is None or not self.ready.is_set():
            return False
        tp = TopicPartition(topic, self.partition_of(thread_id))
        if tp not in self.positions:
            return False  # not this instance's partition (any more)
        end = (await consumer.end_offsets([tp]))[tp]
        while tp in self.positions and await consumer.position(tp) < end:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            await self.progress.next(min(left, POSITION_POLL_S))
        return tp in self.positions

    # ------------------------------------------------------------ routing

    def _on_decision(self, record: ConsumerRecord) -> None:
        try:
            raw = orjson.loads(record.value)
        except orjson.JSONDecodeError as exc:
            log.warning("decision at %d@%d skipped: not JSON (%s)", record.partition,
                        record.offset, exc)
            return
        if not isinstance(raw, dict):
            log.warning("decision at %d@%d skipped: not a JSON object", record.partition,
                        record.offset)
            return
        if raw.get("verdict") == "admitted":
            thread_id, run_id = raw.get("threadId"), raw.get("runId")
            if isinstance(thread_id, str) and isinstance(run_id, str):
                self.admitted.put((thread_id, run_id), record.timestamp)
                if (settled := self._decided.get((thread_id, run_id))) is not None:
                    settled.set()
        key = (_text(raw.get("threadId")), _text(raw.get("requestId")))
        waiters = self._waiters.get(key)  # type: ignore[arg-type]
        if not waiters:
            return
        fields = run_fields(key[0], _text(raw.get("runId")), key[1])
        try:
            decision = Decision.model_validate(raw)
        except ValidationError as exc:
            log.warning("invalid decision for request %s: %s", key[1], exc, extra=fields)
            return
        for waiter in waiters:
            if not waiter.decisions.put(decision):
                log.error("decision queue full for request %s", key[1], extra=fields)

    def _on_events(self, partition: int, records: Sequence[ConsumerRecord]) -> None:
        """Route one partition's events, in offset order. The hot path, once per event: a
        run's events come together, so a record of the run just seen reuses its key and
        its streams, and a run's deliveries are handed to each stream as one list."""
        streams, run_starts = self._streams, self.run_starts
        raw: tuple[bytes, bytes] | None = None  # the current run's key and runId, as read
        key: RunKey = ("", "")
        subs: set[RunStream] | None = None
        pending: list[Delivery] = []
        pending_bytes = 0
        for record in records:
            headers: Sequence[tuple[str, bytes | None]] = record.headers or ()
            if (len(headers) > 3 and headers[0][0] == RUN_ID and headers[1][0] == EVENT_TYPE
                    and headers[3][0] == SEQ):  # the order ``EventHeaders`` writes
                run_id, kind, seq = headers[0][1], headers[1][1], headers[3][1]
            else:  # any other: the first of each name wins, as ``header_value`` has it
                first = dict(reversed(headers))
                run_id, kind, seq = first.get(RUN_ID), first.get(EVENT_TYPE), first.get(SEQ)
            thread, value = record.key, record.value
            if run_id is None or seq is None or thread is None or value is None:
                continue  # not an event of a run (a tombstone is none either)
            if raw is None or raw[0] != thread or raw[1] != run_id:
                if pending:
                    self._deliver(key, subs, pending, pending_bytes)
                    pending = []
                    pending_bytes = 0
                raw = (thread, run_id)
                key = (thread.decode("utf-8", "replace"), run_id.decode("utf-8", "replace"))
                run_starts.setdefault(key, (partition, record.offset))
                subs = streams.get(key)
            event_type = _type_name(kind) if kind is not None else ""
            if event_type in TERMINAL_TYPES:
                self._ended(key, event_type, record)
            if subs:
                try:
                    number = int(seq)
                except ValueError:
                    continue
                # tuple.__new__: a NamedTuple's own __new__ is a Python function (0.7 µs a
                # call here, against 0.2)
                pending.append(_new_tuple(Delivery, (number, event_type, value, record.offset)))
                pending_bytes += len(value)
        if pending:
            self._deliver(key, subs, pending, pending_bytes)

    def _deliver(self, key: RunKey, subs: set[RunStream] | None,
                 deliveries: list[Delivery], nbytes: int) -> None:
        for stream in tuple(subs or ()):
            if not stream.push_all(deliveries, nbytes):
                log.error("stream of run %s dropped: client reads too slowly "
                          "(%d events buffered)", key[1], self.stream_queue,
                          extra={"threadId": key[0], "runId": key[1]})
                self.metrics.streams_dropped.labels("slow_client").inc()
                self.unsubscribe(stream)

    def _ended(self, key: RunKey, event_type: str, record: ConsumerRecord) -> None:
        """Remember the run's terminal event (its first one: a late one changes nothing)."""
        if key in self.ended:
            return
        value = record.value if len(record.value or b"") <= KEPT_BYTES else None
        self.ended.put(key, Ending(key[1], event_type, header_value(record.headers, AGENT) or "",
                                   record.offset, value))
        self.last_ended.put(key[0], key[1])
