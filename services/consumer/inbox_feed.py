"""The live side of the interrupt index: changes pushed to ``GET /interrupts/stream``.

``InterruptFeed.on_state`` is the thread view's change hook: each record
the view applies goes through the ``InterruptIndex``, and every change
(opened, answered) is offered to the subscribers whose tenant may see the
thread. Expiry needs no record — an interrupt expires on its own clock — so
the feed keeps ONE timer armed for the index's earliest expiry (a heap, not
a task per interrupt); when it fires, the due entries are announced
``expired`` and the timer is armed for the next one.

Subscribers are grouped by what they may see (principal, and whether
tenancy is enforced): a change costs the groups that see it, and its frame
and each batch's bytes are built once per group and shared by its
subscribers, so 1,000 streams of another tenant cost nothing. A batch (one
applied record, one timer's expiries, one load's tool calls) is queued whole;
a large one goes out ``SLICE`` changes per loop callback, in order, so a
mass expiry never holds the loop. A subscriber is judged once per batch:
one that still has more than ``QUEUE_BYTES`` of earlier batches unsent (a
stalled client) is dropped — its stream ends — instead of buffering without
limit; the page reconnects and lists again, which is also what it does at
start. A burst is not a stall: a client that keeps up gets every change, a
callback announcing at most ``SLICE_BYTES`` of frames so it drains the
burst slice by slice; but what one holds is bounded within a batch too,
``BURST_BYTES``: a client that reads nothing is dropped there, however large
the burst (chunks are shared by a group's subscribers). The
stream is ``data: <change JSON>`` frames, a ``: keep-alive`` comment after
``keepalive_s`` of silence, and a first ``: ready`` comment so a client
knows it is subscribed before it lists (nothing between is lost).

``ToolCallLoader`` fetches the gated tool calls the index asks for
(``InterruptIndex.take_loads``): one task, started when there is something
to read and ending when there is nothing left, reads each partition of
``events`` once per batch of loads, from the earliest run admission they
name (less ``interrupts.SKEW``) to the end offset it found, keeps only the
asked threads' run-start, snapshot and tool-call events (chosen by their key
and type header before anything is decoded, resent copies dropped by run
and sequence), rebuilds their tool calls (``services.agui.transcript``) and
hands them to the index, which announces them ``updated``. A failed read is
logged and its calls stay unlisted. How much it may hold is
``InboxSettings`` (``AGUI_INBOX_TOOL_CALLS``, ``AGUI_INBOX_TOOL_CALL_BYTES``,
``AGUI_INBOX_INTERRUPT_BYTES``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.headers import EVENT_TYPE, RUN_ID, SEQ, header_value
from services.agui.transcript import replay
from services.consumer.interrupts import (
    Budget,
    Change,
    InterruptIndex,
    Load,
    tool_calls_of,
    visible,
)
from services.consumer.problems import RetryLater
from services.kafka.clients import ConsumerRecord, TopicPartition
from services.kafka.reader import Start, TopicReader
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

HISTORY_READS = 4
"""Thread histories read at once per instance; past it ``503 busy`` (each read is a Kafka
consumer scanning two partitions: a flood of them must not take the instance down)."""
QUEUE_BYTES = 1 << 20
"""Bytes of earlier batches a subscriber may have unsent when a batch comes before it is
dropped (a count of 256 changes cut healthy clients at every burst, while 256 large
interrupts could queue 64 MB; a bound applied within a batch cut a client that read
everything at 1,966 of a mass expiry's 10,000 changes)."""
BURST_BYTES = 16 * QUEUE_BYTES
"""What a subscriber may hold unsent at most, within a batch too: one that a chunk would
take past it is dropped (a mass expiry of 400 interrupts of 50 kB had queued 20 MB for a
client that read nothing, and what it held grew with the burst). A client that reads
between turns of the loop holds a slice at most (``SLICE_BYTES``), never near it."""
SLICE = 1_000
"""Changes announced per loop callback (10,000 expiring at once to 1,000 streams had
held the loop for seconds)."""
SLICE_BYTES = 4 * QUEUE_BYTES
"""Frame bytes announced per loop callback at most (past it, after the change that
passed it): a burst of large interrupts goes out in slices a reading client drains."""
FULL_RETRY_AFTER_S = 5
"""``Retry-After`` of a subscription refused because the instance serves its most."""
KEEPALIVE = b": keep-alive\n\n"
READY = b": ready\n\n"
END = b""
"""Queued by ``close``: the stream ends there."""


TOOL_CALL_TYPES = frozenset({"RUN_STARTED", "MESSAGES_SNAPSHOT", "TOOL_CALL_START",
                             "TOOL_CALL_ARGS", "TOOL_CALL_CHUNK"})
"""The events a thread's tool calls are rebuilt from (an input's echo holds earlier ones)."""


class InboxSettings(BaseSettings):
    """``AGUI_INBOX_*``: what the inbox index may hold of the gated tool calls."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True,
                                      allow_inf_nan=False)

    tool_calls: int = Field(10_000, alias="AGUI_INBOX_TOOL_CALLS", ge=0, le=10_000_000)
    """Tool calls held at most (one per open interrupt gating one); 0: none are listed."""
    tool_call_bytes: int = Field(16_384, alias="AGUI_INBOX_TOOL_CALL_BYTES", ge=0,
                                 le=1_048_576)
    """A call's arguments (JSON text) listed up to this size; larger ones are not held."""
    interrupt_bytes: int = Field(4_096, alias="AGUI_INBOX_INTERRUPT_BYTES", ge=256,
                                 le=104_857_600)
    """An open interrupt held whole in the index up to this much JSON; a larger one is
    held slim and completed from the thread view when it is listed or announced."""
    max_feeds: int = Field(1_000, alias="AGUI_INBOX_MAX_FEEDS", ge=1, le=1_000_000)
    """``/interrupts/stream`` connections one instance serves at once; past it ``503
    too_many_streams`` with ``Retry-After`` (each holds a socket and what its kernel
    buffers for a client that does not read)."""

    def budget(self) -> Budget:
        return Budget(self.tool_calls, self.tool_call_bytes, self.interrupt_bytes)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


Group = tuple[str, bool]
"""(principal, enforced): subscribers who see the same changes."""


class Subscriber:
    """One ``/interrupts/stream`` connection."""

    def __init__(self, principal: str, enforced: bool) -> None:
        self.principal = principal
        self.enforced = enforced
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.queued = 0
        """Bytes in ``queue`` (judged against ``QUEUE_BYTES`` as each batch comes)."""
        self.dropped = False
        self.batch = -1
        """The last batch offered (it is judged at its first chunk of a batch)."""

    @property
    def group(self) -> Group:
        return self.principal, self.enforced

    def offer(self, chunk: bytes, batch: int) -> bool:
        """Queue a chunk of ``batch``'s frames; False when the batch finds more than
        ``QUEUE_BYTES`` of earlier ones unsent, or the chunk would take what is unsent past
        ``BURST_BYTES`` (the subscriber is then dropped; an empty queue takes any chunk)."""
        if ((batch != self.batch and self.queued > QUEUE_BYTES)
                or (self.queued and self.queued + len(chunk) > BURST_BYTES)):
            self.dropped = True
            return False
        self.batch = batch
        self.queue.put_nowait(chunk)
        self.queued += len(chunk)
        return True

    def end(self) -> None:
        self.dropped = True
        self.queue.put_nowait(END)

    async def next(self) -> list[bytes]:
        """The frames queued, waiting for one."""
        frames = [await self.queue.get()]
        while not self.queue.empty():
            frames.append(self.queue.get_nowait())
        self.queued -= sum(map(len, frames))
        return frames


class InterruptFeed:
    """The index, its subscribers and its one expiry timer."""

    def __init__(self, clock: Callable[[], int] = wall_ms, *, budget: Budget | None = None,
                 kafka: KafkaSettings | None = None, max_subscribers: int = 1_000) -> None:
        self.index = InterruptIndex(budget or Budget())
        self.clock = clock
        self.max_subscribers = max_subscribers
        self.loader = ToolCallLoader(kafka, self.index, self.announce) if kafka else None
        """Reads the tool calls the index asks for (none without Kafka: a unit test)."""
        self.subscribers: set[Subscriber] = set()
        self._groups: dict[Group, set[Subscriber]] = {}
        self._pending: deque[tuple[int, list[Change], int]] = deque()
        """Batches not yet all announced: (batch, changes, first not announced)."""
        self._batches = itertools.count()
        self._flush: asyncio.Handle | None = None
        self._flushed = asyncio.Event()
        self._flushed.set()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_ms: int | None = None
        self.history_slots = asyncio.Semaphore(HISTORY_READS)
        """Bounds the history route's topic reads (``interrupt_routes``)."""

    def on_state(self, thread_id: str, value: bytes | None) -> None:
        """The thread view applied a record: index it, announce, re-arm the timer."""
        self.announce(self.index.apply(thread_id, value))
        self._arm()
        if self.loader is not None:
            self.loader.wake()

    def announce(self, changes: list[Change]) -> None:
        """Queue a batch for the subscribers who may see it, after the batches before it."""
        if not changes or not self.subscribers:
            return
        self._pending.append((next(self._batches), changes, 0))
        self._flushed.clear()
        if self._flush is None:
            self._send()

    def _send(self) -> None:
        """Announce ``SLICE`` pending changes (fewer past ``SLICE_BYTES``); the rest in a
        later loop callback."""
        self._flush = None
        room, room_bytes = SLICE, SLICE_BYTES
        while self._pending and room > 0 and room_bytes > 0:
            batch, changes, start = self._pending[0]
            taken, built = self._offer(batch, changes[start:start + room], room_bytes)
            end = start + taken
            if end < len(changes):
                self._pending[0] = (batch, changes, end)
            else:
                self._pending.popleft()
            room -= taken
            room_bytes -= built
        if not self._pending:
            self._flushed.set()
            return
        try:
            self._flush = asyncio.get_running_loop().call_soon(self._send)
        except RuntimeError:  # outside a loop (a unit test): all at once
            self._send()

    def _offer(self, batch: int, changes: list[Change], room_bytes: int) -> tuple[int, int]:
        """Each change's frame built once, for the groups that see it; a chunk per group.
        Stops after the change whose frames pass ``room_bytes``: (changes taken, bytes)."""
        now = self.clock()
        seers: dict[str | None, list[Group]] = {}
        frames: dict[Group, list[bytes]] = {}
        taken = built = 0
        for change in changes:
            taken += 1
            owner = change.entry.principal
            groups = seers.get(owner)
            if groups is None:
                groups = seers[owner] = self._seeing(owner)
            if not groups:
                continue
            frame = b"data: " + orjson.dumps(self.index.wire_change(change, now)) + b"\n\n"
            for group in groups:
                frames.setdefault(group, []).append(frame)
            built += len(frame) * len(groups)
            if built >= room_bytes:
                break
        for group, shown in frames.items():
            chunk = b"".join(shown)
            for sub in list(self._groups.get(group, ())):
                if not sub.offer(chunk, batch):
                    self.unsubscribe(sub)  # its stream ends once drained
        return taken, built

    def _seeing(self, owner: str | None) -> list[Group]:
        """The groups that may see an interrupt of ``owner`` (``interrupts.visible``)."""
        if owner is not None:
            return [g for g in ((owner, True), (owner, False)) if g in self._groups]
        return [g for g in self._groups if visible(None, g[0], enforced=g[1])]

    async def flushed(self) -> None:
        """Wait until every batch is announced (tests)."""
        await self._flushed.wait()

    def _arm(self) -> None:
        due = self.index.next_expiry_ms()
        if due == self._armed_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed_ms = due
        if due is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # applied outside a loop (a unit test): ``fire`` by hand
            return
        self._timer = loop.call_later(max(0.0, (due - self.clock()) / 1000), self.fire)

    def fire(self) -> None:
        """The timer: announce what expired by now, then wait for the next expiry."""
        self._timer = None
        self._armed_ms = None
        self.announce(self.index.due(self.clock()))
        self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        self._pending.clear()
        self._flushed.set()

    def close(self) -> None:
        """End every stream now (shutdown: a browser tab must not hold the grace period)."""
        self.stop()
        for sub in self.subscribers:
            sub.end()
        self.subscribers.clear()
        self._groups.clear()

    async def aclose(self) -> None:
        """``close``, and stop reading tool calls (the app's shutdown)."""
        self.close()
        if self.loader is not None:
            await self.loader.stop()

    def subscribe(self, principal: str, *, enforced: bool) -> Subscriber:
        """A new subscriber; ``RetryLater`` ``too_many_streams`` when ``max_subscribers``
        are served already."""
        if len(self.subscribers) >= self.max_subscribers:
            raise RetryLater("too_many_streams", f"this instance already serves "
                             f"{self.max_subscribers} interrupt streams (AGUI_INBOX_MAX_FEEDS)",
                             FULL_RETRY_AFTER_S)
        sub = Subscriber(principal, enforced)
        self.subscribers.add(sub)
        self._groups.setdefault(sub.group, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        group = self._groups.get(sub.group)
        if group is not None:
            group.discard(sub)
            if not group:
                del self._groups[sub.group]


class ToolCallLoader:
    """Reads the tool calls the index asks for, in one task while there are some."""

    def __init__(self, kafka: KafkaSettings, index: InterruptIndex,
                 announce: Callable[[list[Change]], None]) -> None:
        self.kafka = kafka
        self.index = index
        self.announce = announce
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Start reading unless a read is under way (it takes what is asked next)."""
        if self._task is not None and not self._task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._task = loop.create_task(self._drain(), name="consumer-inbox-tool-calls")

    async def idle(self) -> None:
        """Wait until nothing is being read (tests, the benchmark)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _drain(self) -> None:
        while loads := self.index.take_loads():
            left = {load.thread_id: load for load in loads}
            try:
                async with TopicReader(self.kafka, "agui-consumer-inbox") as reader:
                    parts: dict[TopicPartition, list[Load]] = {}
                    for load in loads:
                        tp = await reader.key_partition(self.kafka.topics.events, load.thread_id)
                        parts.setdefault(tp, []).append(load)
                    for tp, asked in parts.items():
                        found = await self._read(reader, tp, asked)
                        for load in asked:
                            del left[load.thread_id]
                            self.announce(self.index.learn(load, found[load.thread_id]))
            except Exception as exc:  # a background read: any failure leaves them unlisted
                log.warning("inbox: tool calls of %d threads not read: %s", len(left), exc)
            finally:
                for load in left.values():
                    self.index.learn(load, {})

    async def _read(self, reader: TopicReader, tp: TopicPartition, loads: list[Load]
                    ) -> dict[str, Any]:
        """The tool calls of each load's thread, from one read of its events partition."""
        keys = {load.thread_id.encode(): load.thread_id for load in loads}
        kept: dict[str, list[tuple[int, dict[str, Any]]]] = {t: [] for t in keys.values()}
        seen: set[tuple[bytes, str, str]] = set()
        ends = await reader.assign([tp], Start.at(min(load.since_ms for load in loads)))
        async for batch in reader.batches(until=ends):
            for record in batch:
                event = _wanted(record, keys, seen)
                if event is not None:
                    kept[keys[record.key]].append((record.offset, event))
        budget = self.index.budget.argument_bytes
        return {thread: tool_calls_of(replay(e for _, e in sorted(events, key=lambda x: x[0]))
                                      .messages, budget)
                for thread, events in kept.items()}


def _wanted(record: ConsumerRecord[Any, Any], keys: dict[bytes, str],
            seen: set[tuple[bytes, str, str]]) -> dict[str, Any] | None:
    """The record's event when it is one of an asked thread's tool-call events, once."""
    if record.key not in keys or record.value is None:
        return None
    headers = record.headers
    if header_value(headers, EVENT_TYPE) not in TOOL_CALL_TYPES:
        return None
    run, seq = header_value(headers, RUN_ID), header_value(headers, SEQ)
    if run is not None and seq is not None:
        if (record.key, run, seq) in seen:
            return None
        seen.add((record.key, run, seq))
    try:
        value = orjson.loads(record.value)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def stream_body(sub: Subscriber, keepalive_s: float) -> AsyncIterator[bytes]:
    """The SSE bytes of one subscriber, until it is dropped (or the client leaves)."""
    yield READY
    while True:
        try:
            async with asyncio.timeout(keepalive_s):
                frames = await sub.next()
        except TimeoutError:
            if sub.dropped:
                return
            yield KEEPALIVE
            continue
        chunk = b"".join(frames)
        if chunk:
            yield chunk
        if END in frames or (sub.dropped and sub.queue.empty()):
            return
