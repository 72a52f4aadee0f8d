"""The SSE body of a run: ordered, deduplicated, flushed at once, kept alive.

``run_body`` turns a run's deliveries into SSE bytes: first an optional
*preface* (records already on the topic, read by a replay), then the live
``RunStream`` the fan-out fills. Each batch of ready frames is yielded at
once (so it is flushed to the client without waiting for more), a
``: keep-alive`` comment goes out after ``keepalive_s`` of silence, and the
body ends right after the run's first terminal event, RUN_FINISHED or
RUN_ERROR. A stream whose client fell a full queue behind reads the run from
the log once its queue is drained (``log_tail``), through the same
``Sequencer``, until it has caught up with the fan-out. It does not wait
for a late RUN_ERROR after RUN_FINISHED: AG-UI
lets a run report one, but holding every stream open for a grace period
would delay every client for a rare case; the late error is on the events
topic, and the replay route shows it. The body never writes an event of
its own: a stream that ends early (client gone or idle, shutdown, the log
unreadable) is truncated, never finished; one whose records the log no longer
holds (``log_tail.EventsGone``) has its connection broken off, so the client
sees an error and not an end; and it never sends a record whose
value is not a JSON object (another writer's), which is skipped with a
warning before it can take a sequence number from the run's own record, as is
one whose value is longer than ``AGUI_MAX_RECORD_BYTES`` (``max_event_bytes``:
the producer writes none; a compressed batch lets another writer put one on
the topic that the broker counted small).

``EventStreamResponse`` runs a synchronous ``on_close`` when the response
ends for any reason (terminal, disconnect, drop), which is where the route
unsubscribes and, if configured, cancels the run (not when the connection was
closed for reading nothing, ``write_idle``: that outcome is a drop). It streams without
Starlette's per-response anyio task group (two tasks and cancel scopes, about
a tenth of the service's CPU per run under load): one plain task waits for
the client's disconnect and cancels the response if it comes first, and the
chunk carrying the terminal event also ends the body (one write, not two).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from services.consumer.log_tail import EventsGone
from services.consumer.ordering import (
    KEEPALIVE,
    TERMINAL_TYPES,
    Sequencer,
    frame_parts,
    sse_value,
)
from services.consumer.streams import Delivery, RunKey, RunStream
from services.consumer.write_idle import abort_connection, closed_idle, unsent_of
from services.kafka.clients import KafkaError

log = logging.getLogger(__name__)

GAP_WAIT_S = 0.5
"""How long a stream holds records behind a sequence gap before giving up on it."""

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_RAW_HEADERS = (*((k.lower().encode("latin-1"), v.encode("latin-1"))
                  for k, v in SSE_HEADERS.items()),
                (b"content-type", b"text/event-stream; charset=utf-8"))
"""What Starlette would send for them, built once."""


@dataclass
class StreamOutcome:
    """How a body ended, read by ``on_close``."""

    terminal: bool = False
    dropped: bool = False
    frames: int = 0
    last_chunk: bool = False
    """Set just before the body yields its final chunk (the live terminal one)."""
    broken: bool = False
    """The body's source broke off (a forward's owner): its connection is aborted, so
    the client sees a broken body, not a whole one."""
    unsent: Callable[[], int] | None = None
    """The bytes the client has not taken yet (``write_idle.unsent_of``), once the response
    has started: a log reader's turn tells a slow client from one reading nothing by it."""


async def run_body(
    stream: RunStream,
    outcome: StreamOutcome,
    *,
    keepalive_s: float,
    after: int | None = None,
    preface: AsyncIterator[Delivery | None] | None = None,
    with_ids: bool = True,
    max_event_bytes: int = 0,
) -> AsyncIterator[bytes]:
    """The SSE bytes of one run (see the module docstring; ``max_event_bytes`` 0: any)."""
    sequencer: Sequencer[Delivery] = Sequencer(after=after)
    check = _Usable(stream.key, sequencer, outcome, max_event_bytes)
    if preface is not None:
        async for chunk in _relayed(preface, sequencer, outcome, keepalive_s, with_ids,
                                    check, stop=False):
            yield chunk
        if outcome.terminal:
            return
    buffer = stream.buffer
    while True:
        if stream.dropped and not buffer:
            outcome.dropped = True
            return
        if stream.lag.behind and not buffer and stream.tail is not None:
            try:
                async with contextlib.aclosing(stream.tail.follow(stream, outcome)) as items:
                    async for chunk in _relayed(items, sequencer, outcome, keepalive_s,
                                                with_ids, check, stop=True):
                        yield chunk
            except EventsGone as exc:
                log.warning("stream of run %s broken off: %s", stream.run_id, exc)
                outcome.dropped = outcome.broken = True
                return
            except KafkaError as exc:
                log.warning("stream of run %s ends: its log cannot be read: %s",
                            stream.run_id, exc)
                outcome.dropped = True
                return
            if outcome.terminal:
                return
            continue
        if await buffer.wait(GAP_WAIT_S if sequencer.waiting else keepalive_s):
            ready = sequencer.offer_all(check.sequenced(buffer.take_all()))
        elif stream.lag.behind or stream.dropped:
            continue  # woken to go to the log (or to end), not by silence
        elif not sequencer.waiting:
            yield KEEPALIVE
            continue
        else:
            ready = sequencer.release()
        chunk = _frames(ready, outcome, with_ids, stop=True)
        if chunk:
            outcome.last_chunk = outcome.terminal
            yield chunk
        if outcome.terminal:
            return


async def _relayed(items: AsyncIterator[Delivery | None], sequencer: Sequencer[Delivery],
                   outcome: StreamOutcome, keepalive_s: float, with_ids: bool,
                   check: _Usable, *, stop: bool) -> AsyncIterator[bytes]:
    """Frames of records read from the topic (a replay's scan, a log reader's run) as they
    come; ``None`` items are ticks, a keep-alive after ``keepalive_s`` of silence. With
    ``stop``, nothing after the first terminal event."""
    last_write = time.monotonic()
    async for item in items:
        if item is None:
            if time.monotonic() - last_write >= keepalive_s:
                last_write = time.monotonic()
                yield KEEPALIVE
            continue
        usable = check(item)
        chunk = _frames(sequencer.offer(usable.seq, usable) if usable is not None else [],
                        outcome, with_ids, stop=stop)
        if chunk:
            last_write = time.monotonic()
            yield chunk
        if stop and outcome.terminal:
            return


class _Usable:
    """Which deliveries of a run reach its client, each made one ``data:`` line."""

    __slots__ = ("key", "max_bytes", "outcome", "sequencer")

    def __init__(self, key: RunKey, sequencer: Sequencer[Delivery], outcome: StreamOutcome,
                 max_bytes: int) -> None:
        self.key, self.sequencer, self.outcome = key, sequencer, outcome
        self.max_bytes = max_bytes

    def sequenced(self, deliveries: Iterable[Delivery]) -> Iterator[tuple[int, Delivery]]:
        """(seq, delivery) for the sequencer of each usable delivery."""
        for delivery in deliveries:
            usable = self(delivery)
            if usable is not None:
                yield usable.seq, usable

    def __call__(self, delivery: Delivery) -> Delivery | None:
        """The delivery with its value made one ``data:`` line (``sse_value``), or None.

        A record whose value is not a JSON object, or is longer than a record may
        be (another writer's: the producer writes neither), is skipped with a
        warning *before* it is sequenced, so it takes no sequence number from the
        run's own record and never reaches a client.
        A terminal event at or below what the client has (a ``Last-Event-ID`` at or
        past the run's end, given while it ran) ends the stream: the sequencer drops
        it as already delivered, and the stream would otherwise wait for ever.
        """
        if self.max_bytes and len(delivery.value) > self.max_bytes:
            self._unusable(delivery, f"holds {len(delivery.value)} bytes, more than a "
                           f"record may (AGUI_MAX_RECORD_BYTES {self.max_bytes})")
            return None
        line = sse_value(delivery.value)
        if line is None:
            self._unusable(delivery, "is not a JSON object")
            return None
        sequencer = self.sequencer
        if (delivery.event_type in TERMINAL_TYPES and sequencer.after is not None
                and delivery.seq <= sequencer.after):
            self.outcome.terminal = True
        return delivery if line is delivery.value else delivery._replace(value=line)

    def _unusable(self, delivery: Delivery, why: str) -> None:
        """Skip it, saying why. A terminal event too: another writer's junk may carry the
        run's own terminal number, and the run's real end, the producer's, still comes."""
        key = self.key
        log.warning("event record at offset %d (seq %d) of run %s %s; not sent",
                    delivery.offset, delivery.seq, key[1], why,
                    extra={"threadId": key[0], "runId": key[1]})


def _frames(ready: list[tuple[int, Delivery]], outcome: StreamOutcome, with_ids: bool,
            *, stop: bool) -> bytes:
    """Frame the ready deliveries; with ``stop``, nothing after the first terminal."""
    parts: list[bytes] = []
    frames = 0
    for seq, delivery in ready:
        parts += frame_parts(delivery.value, seq if with_ids else None)
        frames += 1
        if delivery.event_type in TERMINAL_TYPES:
            outcome.terminal = True
            if stop:
                break
    outcome.frames += frames
    return b"".join(parts)


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` whose ``on_close`` runs however the response ends."""

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[bytes], on_close: Callable[[], None],
                 outcome: StreamOutcome | None = None) -> None:
        # StreamingResponse.__init__ is skipped on purpose: the headers never vary.
        self.body_iterator = body
        self.status_code = 200
        self.background = None
        self.raw_headers = list(_RAW_HEADERS)
        self._on_close = on_close
        self._outcome = outcome
        """Read after each chunk: ``last_chunk`` makes that chunk end the body too."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        watch = _Watch(task)
        watcher = asyncio.get_running_loop().create_task(disconnected(receive))
        watcher.add_done_callback(watch.on_disconnect)
        outcome = self._outcome
        if outcome is not None:
            outcome.unsent = unsent_of(scope)
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                last = outcome is not None and outcome.last_chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                if last:
                    break
            else:
                if outcome is None or not outcome.broken or not abort_connection(scope):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not watch.fired or task.uncancel() > 0:
                raise
            # the client went away first: the response just ends, as Starlette's does
            if outcome is not None and closed_idle(scope):
                outcome.dropped = True
        finally:
            watch.done = True
            watcher.cancel()
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
            self._on_close()


class _Watch:
    """Cancels the response's task when the client disconnects first."""

    __slots__ = ("done", "fired", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.done = False
        self.fired = False

    def on_disconnect(self, watcher: asyncio.Task[None]) -> None:
        if self.done or watcher.cancelled() or watcher.exception() is not None:
            return
        self.fired = True
        self.task.cancel()


async def disconnected(receive: Receive) -> None:
    """Return once the server reports the client gone (or the response complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass
