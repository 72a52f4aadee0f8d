"""The inbox's routes: open interrupts listed, streamed, and one thread's history.

Declared on their own ``served`` router, which ``install`` has ``direct``
serve (inside the run and thread routes' ``DirectRoutes``, so a run's
request never looks at these), behind the same authentication and header
guards as every route; the app's OpenAPI document lists them too. Tenancy is the
thread routes' rule: ``GET /interrupts`` and its stream show only threads
the caller may read (``interrupts.visible``), and the history route reads
a thread through ``relay.tenancy``, so another tenant's thread is the same
``404 unknown_thread`` as everywhere.

``GET /interrupts`` lists each interrupt's gated tool call (``toolCall``:
id, name, arguments) once the feed's loader has read it (``inbox_feed``:
one bounded background read per interrupt opening, never per request; an
``updated`` change on the stream says when it arrives).
``GET /interrupts/threads/{thread_id}`` is what a thread state does not
hold: every tool call of the thread with its arguments, the input a
resume carries (the thread's messages and state rebuilt from its events,
as ``agui-relay resume`` sends them: ``services.agui.transcript``) and the audit trail
(decisions and run boundaries in order). It scans the thread's partitions
of ``events`` and ``decisions`` (the CLI's reader), so it is asked per
thread, when a person opens it, never per listed interrupt, and at most
``HISTORY_READS`` at once (``503 busy`` past that).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from contracts import ThreadState
from contracts.headers import ascii_int
from services.agui.transcript import Replayer
from services.consumer import direct
from services.consumer.inbox_feed import (
    HISTORY_READS,
    InboxSettings,
    InterruptFeed,
    stream_body,
    wall_ms,
)
from services.consumer.interrupt_order import Key, decode_cursor, encode_cursor
from services.consumer.interrupts import Filters, Lookup, tool_calls_of
from services.consumer.lookback import BUSY_RETRY_AFTER_S
from services.consumer.problems import InvalidInput, RetryLater, Unavailable
from services.consumer.relay import Relay
from services.consumer.routes import _ids, _principal, _problems, _relay
from services.consumer.sse import EventStreamResponse
from services.consumer.views import ThreadView
from services.kafka.thread_log import Fold, ThreadRecords, read_thread

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
TRAIL_EVENTS = frozenset({"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR"})

served = APIRouter()
"""The inbox's API routes: served by ``direct`` alone, never included in the app."""


def feed(request: Request) -> InterruptFeed:
    found: InterruptFeed = request.app.state.interrupts
    return found


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = ascii_int(raw)
    if value is None or not low <= value <= high:
        raise InvalidInput("invalid_input", f"{name} must be an integer from {low} to {high}",
                           extra={"field": name})
    return value


def _filters(request: Request) -> Filters:
    expired = request.query_params.get("expired")
    if expired not in (None, "true", "false"):
        raise InvalidInput("invalid_input", "expired must be true or false",
                           extra={"field": "expired"})
    return Filters(agent=request.query_params.get("agent"),
                   reason=request.query_params.get("reason"),
                   expired=None if expired is None else expired == "true")


def _cursor(request: Request) -> Key | None:
    """The ``cursor`` asked for; with ``offset`` beside it a 400 (taken together, the page
    started ``offset`` items after the cursor: an older client that kept its offset beside
    the ``next`` it follows skipped items without a word)."""
    raw = request.query_params.get("cursor")
    if raw is None:
        return None
    if "offset" in request.query_params:
        raise InvalidInput("invalid_input", "cursor and offset cannot be combined: send a "
                           "page's next as cursor alone, or offset alone",
                           extra={"fields": ["cursor", "offset"]})
    key = decode_cursor(raw)
    if key is None:
        raise InvalidInput("invalid_input", "cursor must be a page's next",
                           extra={"field": "cursor"})
    return key


def _ready(relay: Relay) -> None:
    if not relay.threads.caught_up.is_set():
        raise Unavailable("not_ready", "the service is still reading the thread states")


def _json(body: object) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


@served.get("/interrupts", summary="Every open interrupt of the caller's threads, newest first",
            responses=_problems(400, 503),
            description="Query: `agent`, `reason`, `expired` (true/false), `limit` "
                        f"(1 to {MAX_LIMIT}, default {DEFAULT_LIMIT}), `cursor` (a page's "
                        "`next`: the page after it, with no item skipped or repeated while "
                        "interrupts open and close) or `offset` (positional, for older "
                        "clients; `nextOffset`), never both (400). Each item: `id`, "
                        "`threadId`, `runId`, `agent`, `reason`, `message`, `toolCallId`, "
                        "`toolCall` ({`id`, `name`, `arguments`}: the gated call, the JSON "
                        "value of the arguments the agent streamed; present once read from "
                        "the events, announced `updated` on the stream; without `arguments` "
                        "past `AGUI_INBOX_TOOL_CALL_BYTES`, absent when not found or past "
                        "`AGUI_INBOX_TOOL_CALLS`: `GET /interrupts/threads/{threadId}` has "
                        "them), `responseSchema`, `expiresAt`, `expiresAtMs` (the instant "
                        "the gatekeeper reads from `expiresAt`, epoch milliseconds; absent "
                        "when there is none or it never expires, being unparseable), "
                        "`expired`, `openedAt`.")
async def list_interrupts(request: Request) -> Response:
    relay = _relay(request)
    filters = _filters(request)
    offset = _int(request, "offset", 0, 0, 10**9)
    limit = _int(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    after = _cursor(request)
    _ready(relay)
    now = wall_ms()
    page = feed(request).index.listing(_principal(request), enforced=relay.tenancy.enforced,
                                       filters=filters, now_ms=now, offset=offset, limit=limit,
                                       after=after)
    index = feed(request).index
    items = []
    for entry in page.items:
        items.append(index.wire(entry, now))
        if not entry.whole:  # read from its thread's state: let other requests in between
            await asyncio.sleep(0)
    body: dict[str, Any] = {"interrupts": items, "total": page.total, "now": now}
    if page.next_key is not None:
        body["next"] = encode_cursor(page.next_key)
        if after is None:
            body["nextOffset"] = page.next_offset
    return _json(body)


@served.get("/interrupts/stream", summary="Interrupts opening, answered or expiring (SSE)",
            response_class=EventStreamResponse, status_code=200,
            responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}},
                             "description": "`data:` {type: opened|answered|expired|"
                                            "updated, interrupt} (`updated`: its tool "
                                            "call was read); `: ready` once subscribed"}})
async def stream_interrupts(request: Request) -> EventStreamResponse:
    relay = _relay(request)
    inbox = feed(request)
    sub = inbox.subscribe(_principal(request), enforced=relay.tenancy.enforced)
    return EventStreamResponse(stream_body(sub, relay.settings.keepalive_s),
                               on_close=lambda: inbox.unsubscribe(sub))


def _trail(found: Any) -> list[dict[str, Any]]:
    rows: list[tuple[int, int, dict[str, Any]]] = []
    for record in found.decisions:
        value = record.value if isinstance(record.value, dict) else {}
        row = {"kind": "decision", "at": record.timestamp_ms, "runId": value.get("runId"),
               "verdict": value.get("verdict"), "code": value.get("code"),
               "message": value.get("message")}
        rows.append((record.timestamp_ms, 0, {k: v for k, v in row.items() if v is not None}))
    for record in found.events:
        value = record.value if isinstance(record.value, dict) else {}
        if value.get("type") not in TRAIL_EVENTS:
            continue
        row = {"kind": "event", "at": record.timestamp_ms, "runId": value.get("runId"),
               "type": value.get("type"), "outcome": value.get("outcome"),
               "message": value.get("message"), "code": value.get("code")}
        rows.append((record.timestamp_ms, 1, {k: v for k, v in row.items() if v is not None}))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [r[2] for r in rows]


async def read_history(request: Request, thread_id: str, *, fold: Fold | None = None
                       ) -> tuple[ThreadState | None, ThreadRecords]:
    """The caller's view of the thread (404 for another tenant's) and its records, read as
    one of at most ``HISTORY_READS`` thread histories at once (``503 busy`` past that).
    Only the events a trail needs (a run's start and end) are kept; ``fold`` hears
    every one, off the loop."""
    relay = _ids(request, thread_id)
    state = await relay.tenancy.readable(thread_id, _principal(request))
    slots = feed(request).history_slots
    if slots.locked():
        raise RetryLater("busy", f"{HISTORY_READS} thread histories are being read; "
                                 "try again in a moment", BUSY_RETRY_AFTER_S)
    async with slots:
        found = await read_thread(relay.kafka, thread_id, decisions=True,
                                  event_types=TRAIL_EVENTS, fold=fold)
    return state, found


@served.get("/interrupts/threads/{thread_id}", responses=_problems(400, 404, 503),
            summary="A thread's tool calls, resume input and audit trail, for the inbox")
async def thread_history(thread_id: str, request: Request) -> Response:
    # folded a batch at a time off the loop, its state bounded: a thread's history is its
    # events' to decide, and a long one is never held whole
    replayer = Replayer(max_state_bytes=_relay(request).kafka.max_record_bytes)
    state, found = await read_history(request, thread_id, fold=lambda batch: replayer.feed(
        e.value for e in batch if isinstance(e.value, dict)))
    transcript = replayer.done()
    body: dict[str, Any] = {"threadId": thread_id, "input": transcript.input_fields(),
                            "toolCalls": {i: c.wire() for i, c in
                                          tool_calls_of(transcript.messages).items()},
                            "trail": _trail(found)}
    if state is not None:
        body["thread"] = ThreadView.of(state).model_dump(mode="json", by_alias=True)
    return _json(body)


LOOKUP_MEMO = 4
"""Thread states whose open interrupts a lookup keeps parsed: a page lists one thread's
interrupts together, so one parse serves them all."""


def open_interrupt_of(relay: Relay) -> Lookup:
    """The thread view's open interrupt by thread and id, in wire form (``Lookup``), read
    from the state's record as the topic holds it, each state parsed once for all its
    interrupts (``LOOKUP_MEMO``). Decoding the whole state with pydantic and dumping the
    interrupt, per item, took 22 s for one page of 496 interrupts held slim (62 per
    thread, each state 263 KB of nested metadata), the instance frozen meanwhile (found by
    review)."""
    recent: OrderedDict[str, tuple[bytes, dict[str, Mapping[str, Any]]]] = OrderedDict()

    def lookup(thread_id: str, interrupt_id: str) -> Mapping[str, Any] | None:
        raw = relay.threads.raw(thread_id)
        if raw is None:
            return None
        held = recent.get(thread_id)
        if held is None or held[0] != raw:
            held = (raw, _open_interrupts(thread_id, raw))
            recent[thread_id] = held
            if len(recent) > LOOKUP_MEMO:
                recent.popitem(last=False)
        recent.move_to_end(thread_id)
        return held[1].get(interrupt_id)
    return lookup


def _open_interrupts(thread_id: str, raw: bytes) -> dict[str, Mapping[str, Any]]:
    """A state record's open interrupts by id (none when it is not this thread's state)."""
    try:
        state = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(state, dict) or state.get("threadId") != thread_id:
        return {}
    opened = state.get("openInterrupts")
    out: dict[str, Mapping[str, Any]] = {}
    for item in opened if isinstance(opened, list) else ():
        interrupt = item.get("interrupt") if isinstance(item, dict) else None
        if isinstance(interrupt, dict) and isinstance(interrupt.get("id"), str):
            out[interrupt["id"]] = interrupt
    return out


def install(app: FastAPI, relay: Relay, settings: InboxSettings | None = None
            ) -> InterruptFeed:
    """Index the thread view's states and serve the routes (before ``direct.install``);
    the app's lifespan, on its way out, stops the feed before the relay stops."""
    inbox_settings = settings or InboxSettings()
    inbox = InterruptFeed(budget=inbox_settings.budget(), kafka=relay.kafka,
                          max_subscribers=inbox_settings.max_feeds)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(owner: Any) -> AsyncIterator[Any]:
        async with inner(owner) as state:
            try:
                yield state
            finally:
                await inbox.aclose()

    app.router.lifespan_context = lifespan
    direct.install(app, served)
    relay.threads.listeners.append(inbox.on_state)
    inbox.index.lookup = open_interrupt_of(relay)
    relay.runs.open_interrupts = inbox.index.open_of
    relay.metrics.inbox_interrupts.set_function(lambda: len(inbox.index))
    relay.metrics.inbox_tool_calls.set_function(lambda: inbox.index.tool_calls_held)
    app.state.interrupts = inbox
    return inbox
