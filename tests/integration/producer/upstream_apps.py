"""The suite's own upstream AG-UI services, written with FastAPI, served on loopback.

``upstream_app()`` answers ``POST /<behaviour>`` with one behaviour per
path: ``/good`` is a well-behaved agent (text, a tool call and the 1.0
interrupt outcome; on resume it finishes), ``/unclosed`` finishes with its
message still open, and every other path misbehaves in one way the producer
must turn into one ``RUN_ERROR`` code. ``Upstream`` records each request
(its body and headers) and whether the client went away mid-stream.
``serving()`` runs it with uvicorn in the test's event loop on a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.asgi_server import served

SSE = "text/event-stream"
INTERRUPT = {"id": "approve-1", "reason": "tool_approval", "toolCallId": "call-1",
             "message": "May I look the invoice up?"}


def frame(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


@dataclass
class Upstream:
    """What the upstream saw: every request body and header set, per path."""

    bodies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    headers: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    disconnected: set[str] = field(default_factory=set)
    """Run ids whose stream the client closed before it ended."""
    in_flight: int = 0
    most_in_flight: int = 0
    """The most streams open at once."""
    port: int = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def calls(self, path: str) -> int:
        return len(self.bodies.get(path, ()))


def started(body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": body["threadId"], "runId": body["runId"]}


def finished(body: dict[str, Any], outcome: dict[str, Any]) -> dict[str, Any]:
    return {"type": "RUN_FINISHED", "threadId": body["threadId"], "runId": body["runId"],
            "outcome": outcome}


def text(message_id: str, words: str) -> list[dict[str, Any]]:
    return [{"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": words},
            {"type": "TEXT_MESSAGE_END", "messageId": message_id}]


def good(body: dict[str, Any]) -> list[dict[str, Any]]:
    resume = {e["interruptId"]: e for e in body.get("resume") or ()}
    if "approve-1" in resume:
        approved = (resume["approve-1"].get("payload") or {}).get("approved")
        return [started(body), *text(f"m-{body['runId']}", f"approved={approved}"),
                finished(body, {"type": "success"})]
    return [started(body), *text(f"m-{body['runId']}", "Let me check the invoice."),
            {"type": "TOOL_CALL_START", "toolCallId": "call-1", "toolCallName": "lookup"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": "call-1", "delta": '{"invoice": 42}'},
            {"type": "TOOL_CALL_END", "toolCallId": "call-1"},
            finished(body, {"type": "interrupt", "interrupts": [INTERRUPT]})]


def upstream_app(seen: Upstream) -> FastAPI:
    app = FastAPI()

    def streamed(path: str, body: dict[str, Any], events: AsyncIterator[bytes],
                 media_type: str = SSE) -> Response:
        async def watched() -> AsyncIterator[bytes]:
            ended = False
            seen.in_flight += 1
            seen.most_in_flight = max(seen.most_in_flight, seen.in_flight)
            try:
                async for chunk in events:
                    yield chunk
                ended = True
            finally:
                seen.in_flight -= 1
                if not ended:
                    seen.disconnected.add(body["runId"])
        return StreamingResponse(watched(), media_type=media_type)

    @app.post("/{path}")
    async def answer(path: str, request: Request) -> Response:
        body = orjson.loads(await request.body())
        seen.bodies.setdefault(path, []).append(body)
        seen.headers.setdefault(path, []).append(dict(request.headers))

        async def of(events: list[dict[str, Any]], *, then: str = "end",
                     every_s: float = 0.0) -> AsyncIterator[bytes]:
            for event in events:
                yield frame(event)
                if every_s:
                    await asyncio.sleep(every_s)
            if then == "hang":
                await asyncio.sleep(3600)
            elif then == "drop":
                raise ConnectionResetError("the upstream dies mid-stream")
            elif then == "trickle":
                for n in range(100_000):
                    await asyncio.sleep(0.05)
                    yield frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-slow",
                                 "delta": f"{n} "})

        opening = [started(body), {"type": "TEXT_MESSAGE_START", "messageId": "m-slow",
                                   "role": "assistant"}]
        if path == "good":
            return streamed(path, body, of(good(body)))
        if path == "slow":  # the good agent, taking its time
            return streamed(path, body, of(good(body), every_s=0.1))
        if path == "unclosed":
            return streamed(path, body, of([
                started(body), {"type": "TEXT_MESSAGE_START", "messageId": "m-open",
                                "role": "assistant"},
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-open", "delta": "half"},
                {"type": "TOOL_CALL_START", "toolCallId": "call-open", "toolCallName": "x"},
                finished(body, {"type": "success"})]))
        if path == "problem":
            return JSONResponse({"type": "about:blank", "title": "the ledger is down",
                                 "status": 500, "code": "ledger_down"}, status_code=500,
                                media_type="application/problem+json")
        if path == "unavailable":
            return JSONResponse({"title": "warming up"}, status_code=503)
        if path == "bomb":  # 64 KiB on the wire, 64 MiB inflated; identity was asked for
            return Response(BOMB, status_code=500, media_type="text/plain",
                            headers={"Content-Encoding": "gzip"})
        if path == "echo":  # an error page echoing the request, as some proxies' do
            return JSONResponse({"error": "who are you?", "request": dict(request.headers)},
                                status_code=401)
        if path == "latin1":  # UTF-8 events under a charset that says otherwise
            return streamed(path, body, of([started(body), *text("m-cafe", "café ✓"),
                                            finished(body, {"type": "success"})]),
                            media_type=f"{SSE}; charset=iso-8859-1")
        if path in ("pinging", "dripping"):  # thinks for 1.5 s: keep-alive lines, or not
            async def thinking() -> AsyncIterator[bytes]:
                yield frame(started(body))
                if path == "dripping":
                    yield b"data: {"  # a line begun, then a byte at a time, never ended
                for _ in range(15):
                    await asyncio.sleep(0.1)
                    yield b": keep-alive\n\n" if path == "pinging" else b" "
                if path == "pinging":
                    for event in good(body)[1:]:
                        yield frame(event)
            return streamed(path, body, thinking())
        if path == "upper_case":  # media types are case-insensitive (RFC 9110 8.3.1)
            return streamed(path, body, of([started(body), *text("m-case", "any case"),
                                            finished(body, {"type": "success"})]),
                            media_type="Text/Event-Stream")
        if path == "big_integer":  # valid JSON, but no 64-bit integer holds it
            return streamed(path, body, _raw(frame(started(body)) + b'data: {"type": "CUSTOM"'
                                             b', "name": "n", "value": '
                                             + str(BIG_INTEGER).encode() + b"}\n\n"))
        if path == "lf_crlf":  # each event ends LF, then a CRLF blank line: 300 of 1 KiB
            events = [started(body), {"type": "TEXT_MESSAGE_START", "messageId": "m-eol",
                                      "role": "assistant"},
                      *({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-eol",
                         "delta": "x" * 1000} for _ in range(300)),
                      {"type": "TEXT_MESSAGE_END", "messageId": "m-eol"},
                      finished(body, {"type": "success"})]
            return streamed(path, body, _raw(b"".join(
                b"data: " + orjson.dumps(e) + b"\n\r\n" for e in events)))
        if path == "json":
            return JSONResponse({"hello": "this is not an event stream"})
        if path == "garbage":
            return streamed(path, body, _raw(frame(started(body)) + b"data: {not json\n\n"))
        if path == "invalid":
            return streamed(path, body, of([started(body), {"type": "TEXT_MESSAGE_CONTENT",
                                                            "delta": "no message id"}]))
        if path == "huge":  # one event that never ends: 64 KiB chunks of one data line
            async def endless_line() -> AsyncIterator[bytes]:
                yield frame(started(body)) + b'data: {"type": "CUSTOM", "name": "x", "value": "'
                for _ in range(1_000):
                    yield b"x" * 65536
                    await asyncio.sleep(0)
            return streamed(path, body, endless_line())
        if path == "drop":
            return streamed(path, body, of(opening, then="drop"))
        if path == "hang_once":  # the first call hangs, every later one is good
            if seen.calls(path) == 1:
                return streamed(path, body, of(opening, then="hang"))
            return streamed(path, body, of(good(body)))
        if path == "idle":
            return streamed(path, body, of(opening, then="hang"))
        if path == "endless":
            return streamed(path, body, of(opening, then="trickle"))
        return JSONResponse({"title": f"no behaviour {path}"}, status_code=404)

    return app


BIG_INTEGER = 123456789012345678901234567890
"""orjson read it as ``1.2345678901234568e+29``: the run succeeded with another value."""
BOMB = gzip.compress(bytes(64 * 1024 * 1024), compresslevel=9)


async def _raw(data: bytes) -> AsyncIterator[bytes]:
    yield data


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[Upstream]:
    """The upstream app under uvicorn in this event loop, on a free loopback port."""
    seen = Upstream()
    async with served(upstream_app(seen)) as port:
        seen.port = port
        yield seen
