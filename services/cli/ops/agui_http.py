"""A minimal AG-UI HTTP client: POST a ``RunAgentInput``, read the run's SSE stream.

The demo drives the running system the way a front end does — through the
consumer service's ``POST /agents/{agent}`` — and needs no more of the
transport than this: one JSON event per ``data:`` line, comment lines
(keepalives) skipped, and a rejected input answered with an HTTP error and
an ``application/problem+json`` body (``code``, ``detail``,
``interruptIds``) before any stream byte. Lines end at CRLF, LF or CR only,
as SSE defines them (``sse_lines``), not where ``str.splitlines`` would.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson


@dataclass
class RunReply:
    """What one POST produced: the events streamed, or the problem that refused it."""

    status: int
    events: list[dict[str, Any]] = field(default_factory=list)
    problem: dict[str, Any] | None = None

    @property
    def terminal(self) -> dict[str, Any] | None:
        """The RUN_FINISHED or RUN_ERROR that closed the run, if it came."""
        return next((e for e in reversed(self.events)
                     if e.get("type") in ("RUN_FINISHED", "RUN_ERROR")), None)

    @property
    def interrupts(self) -> list[dict[str, Any]]:
        """The interrupts of an interrupt outcome (empty otherwise)."""
        outcome = (self.terminal or {}).get("outcome")
        if isinstance(outcome, dict) and outcome.get("type") == "interrupt":
            return [i for i in outcome.get("interrupts") or [] if isinstance(i, dict)]
        return []


_EOL = re.compile("\r\n|\r|\n")


async def sse_lines(chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """The lines of an SSE body read as text chunks: ended by CRLF, LF or CR only.

    Not httpx's ``aiter_lines``, which splits like ``str.splitlines``: also
    at U+0085, U+2028 and U+2029, which JSON leaves unescaped, so an event
    whose text or ids hold one had its ``data:`` line cut in two.
    """
    pending = ""
    async for chunk in chunks:
        pending += chunk
        held = "\r" if pending.endswith("\r") else ""  # maybe half a CRLF: wait for more
        *lines, rest = _EOL.split(pending[: len(pending) - len(held)])
        for line in lines:
            yield line
        pending = rest + held
    *lines, rest = _EOL.split(pending)
    for line in lines:
        yield line
    if rest:
        yield rest


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an SSE body's ``data:`` fields (multi-line data joined)."""
    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line == "" and data:
            yield orjson.loads("\n".join(data))
            data = []
    if data:
        yield orjson.loads("\n".join(data))


async def run_agent(client: httpx.AsyncClient, agent: str, run_input: dict[str, Any],
                    on_event: Callable[[dict[str, Any]], None] | None = None) -> RunReply:
    """POST ``run_input`` to ``/agents/{agent}`` and read the stream to its end."""
    headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
    token = os.environ.get("AGUI_API_KEY")
    if token:  # a deployment with API keys (AGUI_API_KEYS) wants a bearer token
        headers["Authorization"] = f"Bearer {token}"
    async with client.stream("POST", f"/agents/{agent}", content=orjson.dumps(run_input),
                             headers=headers) as response:
        if response.status_code != 200:
            body = await response.aread()
            try:
                problem = orjson.loads(body)
            except orjson.JSONDecodeError:
                problem = {"detail": body.decode("utf-8", "replace")}
            return RunReply(response.status_code, problem=problem)
        reply = RunReply(200)
        async for event in sse_events(sse_lines(response.aiter_text())):
            reply.events.append(event)
            if on_event is not None:
                on_event(event)
        return reply
