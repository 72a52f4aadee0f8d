"""The SSE body of a run: ordered, deduplicated, flushed at once, kept alive.

``run_body`` turns a run's deliveries into SSE bytes: first an optional
*preface* (records already on the topic, read by a replay), then the live
``RunStream`` the fan-out fills. Each batch of ready frames is yielded at
once (so it is flushed to the client without waiting for more), a
``: keep-alive`` comment goes out after ``keepalive_s`` of silence, and the
body ends right after the run's first terminal event, RUN_FINISHED or
RUN_ERROR. It does not wait for a late RUN_ERROR after RUN_FINISHED: AG-UI
lets a run report one, but holding every stream open for a grace period
would delay every client for a rare case; the late error is on the events
topic, and the replay route shows it. The body never writes an event of
its own: a stream that ends early (client too slow, shutdown) is truncated,
never finished.

``EventStreamResponse`` runs a synchronous ``on_close`` when the response
ends for any reason (terminal, disconnect, drop), which is where the route
unsubscribes and, if configured, cancels the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from services.consumer.ordering import KEEPALIVE, TERMINAL_TYPES, Sequencer, data_frame
from services.consumer.streams import Delivery, RunStream

GAP_WAIT_S = 0.5
"""How long a stream holds records behind a sequence gap before giving up on it."""

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class StreamOutcome:
    """How a body ended, read by ``on_close``."""

    terminal: bool = False
    dropped: bool = False
    frames: int = 0


async def run_body(
    stream: RunStream,
    outcome: StreamOutcome,
    *,
    keepalive_s: float,
    after: int | None = None,
    preface: AsyncIterator[Delivery | None] | None = None,
    with_ids: bool = True,
) -> AsyncIterator[bytes]:
    """The SSE bytes of one run (see the module docstring)."""
    sequencer: Sequencer[Delivery] = Sequencer(after=after)
    last_write = time.monotonic()
    if preface is not None:
        async for item in preface:
            if item is None:  # a tick from a long scan
                if time.monotonic() - last_write >= keepalive_s:
                    last_write = time.monotonic()
                    yield KEEPALIVE
                continue
            chunk = _frames(sequencer.offer(item.seq, item), outcome, with_ids, stop=False)
            if chunk:
                last_write = time.monotonic()
                yield chunk
        if outcome.terminal:
            return
    queue = stream.queue
    while True:
        if stream.dropped and queue.empty():
            outcome.dropped = True
            return
        try:
            async with asyncio.timeout(GAP_WAIT_S if sequencer.waiting else keepalive_s):
                first = await queue.get()
        except TimeoutError:
            if not sequencer.waiting:
                yield KEEPALIVE
                continue
            ready = sequencer.release()
        else:
            ready = sequencer.offer(first.seq, first)
            while not queue.empty():
                more = queue.get_nowait()
                ready += sequencer.offer(more.seq, more)
        chunk = _frames(ready, outcome, with_ids, stop=True)
        if chunk:
            yield chunk
        if outcome.terminal:
            return


def _frames(ready: list[tuple[int, Delivery]], outcome: StreamOutcome, with_ids: bool,
            *, stop: bool) -> bytes:
    """Frame the ready deliveries; with ``stop``, nothing after the first terminal."""
    parts = []
    for seq, delivery in ready:
        parts.append(data_frame(delivery.value, seq if with_ids else None))
        outcome.frames += 1
        if delivery.event_type in TERMINAL_TYPES:
            outcome.terminal = True
            if stop:
                break
    return b"".join(parts)


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` whose ``on_close`` runs however the response ends."""

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(body, status_code=200, headers=SSE_HEADERS,
                         media_type=self.media_type)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
