"""The live side of the interrupt index: changes pushed to ``GET /interrupts/stream``.

``InterruptFeed.on_state`` is the thread view's change hook: each record
the view applies goes through the ``InterruptIndex``, and every change
(opened, answered) is offered to the subscribers whose tenant may see the
thread. Expiry needs no record — an interrupt expires on its own clock — so
the feed keeps ONE timer armed for the index's earliest expiry (a heap, not
a task per interrupt); when it fires, the due entries are announced
``expired`` and the timer is armed for the next one.

A subscriber has a bounded queue. One that falls behind (a stalled client)
is dropped — its stream ends — instead of buffering without limit; the
page reconnects and lists again, which is also what it does at start. The
stream is ``data: <change JSON>`` frames, a ``: keep-alive`` comment after
``keepalive_s`` of silence, and a first ``: ready`` comment so a client
knows it is subscribed before it lists (nothing between is lost).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import orjson

from services.consumer.interrupts import Change, InterruptIndex, visible

HISTORY_READS = 4
"""Thread histories read at once per instance; past it ``503 busy`` (each read is a Kafka
consumer scanning two partitions: a flood of them must not take the instance down)."""
QUEUE_SIZE = 256
"""Changes a subscriber may have unsent before it is dropped."""
KEEPALIVE = b": keep-alive\n\n"
READY = b": ready\n\n"
END = b""
"""Queued by ``close``: the stream ends there."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Subscriber:
    """One ``/interrupts/stream`` connection."""

    def __init__(self, principal: str, enforced: bool) -> None:
        self.principal = principal
        self.enforced = enforced
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(QUEUE_SIZE)
        self.dropped = False

    def offer(self, frame: bytes) -> bool:
        """Queue a frame; False when full (the subscriber is then dropped)."""
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.dropped = True
            return False
        return True


class InterruptFeed:
    """The index, its subscribers and its one expiry timer."""

    def __init__(self, clock: Callable[[], int] = wall_ms) -> None:
        self.index = InterruptIndex()
        self.clock = clock
        self.subscribers: set[Subscriber] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_ms: int | None = None
        self.history_slots = asyncio.Semaphore(HISTORY_READS)
        """Bounds the history route's topic reads (``interrupt_routes``)."""

    def on_state(self, thread_id: str, value: bytes | None) -> None:
        """The thread view applied a record: index it, announce, re-arm the timer."""
        self._announce(self.index.apply(thread_id, value))
        self._arm()

    def _announce(self, changes: list[Change]) -> None:
        if not changes or not self.subscribers:
            return
        now = self.clock()
        for change in changes:
            frame = b"data: " + orjson.dumps(change.wire(now)) + b"\n\n"
            for sub in list(self.subscribers):
                if visible(change.entry.principal, sub.principal, enforced=sub.enforced) \
                        and not sub.offer(frame):
                    self.subscribers.discard(sub)  # its stream ends once drained

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
        self._announce(self.index.due(self.clock()))
        self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        """End every stream now (shutdown: a browser tab must not hold the grace period)."""
        self.stop()
        for sub in self.subscribers:
            sub.dropped = True
            sub.offer(END)
        self.subscribers.clear()

    def subscribe(self, principal: str, *, enforced: bool) -> Subscriber:
        sub = Subscriber(principal, enforced)
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)


async def stream_body(sub: Subscriber, keepalive_s: float) -> AsyncIterator[bytes]:
    """The SSE bytes of one subscriber, until it is dropped (or the client leaves)."""
    yield READY
    while True:
        try:
            async with asyncio.timeout(keepalive_s):
                frame = await sub.queue.get()
        except TimeoutError:
            if sub.dropped:
                return
            yield KEEPALIVE
            continue
        frames = [frame]
        while not sub.queue.empty():
            frames.append(sub.queue.get_nowait())
        chunk = b"".join(frames)
        if chunk:
            yield chunk
        if END in frames or (sub.dropped and sub.queue.empty()):
            return
