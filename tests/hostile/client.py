"""An AG-UI client of one tenant, for hostile requests and the normal flows beside them.

``Tenant`` wraps an ``httpx.AsyncClient`` that sends the tenant's bearer
token on every request (pool limits as the fault suite's, so an idle
connection never races the server's keep-alive close). ``run`` posts a body
— any bytes, so a test can send what no well-behaved client would — and
reads the answer to its end: a problem document or an SSE stream up to its
terminal event (``faults.load.HttpRun``). Every wait is bounded by the
request's timeout. ``approval_flow`` is the README's tour: the ``approval``
agent stops for an approval, a resume approves it, the run finishes.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import orjson
from faults.load import HttpRun, pool_limits, resume_all, run_input
from faults.sse import read_stream

from services.consumer.forward import FORWARDED_BY, REQUEST_ID

JSON = "application/json"
PROBLEM = "application/problem+json"


def as_forwarded(request_id: str) -> dict[str, str]:
    """What makes a client's POST publish under a request id it chose (an instance
    forwarding a request sends these; without a proxy stripping them, a client can too)."""
    return {FORWARDED_BY: "http://127.0.0.1:1", REQUEST_ID: request_id}


def body_of(wire: dict[str, Any] | bytes) -> bytes:
    return wire if isinstance(wire, bytes) else orjson.dumps(wire)


def fresh(tag: str) -> tuple[str, str]:
    """A new (threadId, runId)."""
    token = uuid.uuid4().hex[:10]
    return f"hx-{tag}-{token}", f"run-{tag}-{token}"


def sized(prefix: str, length: int) -> str:
    """A unique id of exactly ``length`` characters starting with ``prefix``."""
    head = f"{prefix}-{uuid.uuid4().hex[:12]}-"
    return (head + "x" * length)[:length]


def problem_of(response: httpx.Response) -> dict[str, Any]:
    """The problem document of a refusal (AssertionError if it is not one)."""
    assert response.headers.get("content-type", "").startswith(PROBLEM), (
        f"{response.status_code} {response.headers.get('content-type')!r}: {response.text[:300]}")
    doc = orjson.loads(response.content)
    assert isinstance(doc, dict), doc
    assert isinstance(doc.get("code"), str), doc
    return doc


class Tenant:
    """One API key's client of the consumer service."""

    def __init__(self, url: str, key: str | None, *, timeout_s: float = 30.0) -> None:
        headers = {"authorization": f"Bearer {key}"} if key is not None else {}
        self.url = url
        self.client = httpx.AsyncClient(base_url=url, headers=headers, limits=pool_limits(16),
                                        timeout=httpx.Timeout(timeout_s))

    async def __aenter__(self) -> Tenant:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def run(self, agent: str, wire: dict[str, Any] | bytes, *,
                  content_type: str | None = JSON, timeout_s: float = 30.0,
                  headers: dict[str, str] | None = None) -> HttpRun:
        """POST ``/agents/{agent}`` (with ``headers`` besides its own) and read the answer
        to its end, within ``timeout_s`` in all (keep-alive comments would reset a read
        timeout for ever)."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self._run(agent, body_of(wire), content_type, timeout_s,
                                       headers or {})
        except TimeoutError:
            return HttpRun(0, error=f"no answer to its end within {timeout_s:.0f} s")

    async def _run(self, agent: str, body: bytes, content_type: str | None,
                   timeout_s: float, extra: dict[str, str]) -> HttpRun:
        headers = {"accept": "text/event-stream", **extra}
        if content_type is not None:
            headers["content-type"] = content_type
        async with self.client.stream("POST", f"/agents/{agent}", content=body,
                                      headers=headers, timeout=timeout_s) as response:
            kind = response.headers.get("content-type", "")
            if response.status_code != 200:
                raw = await response.aread()
                try:
                    problem = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    problem = {"raw": raw[:300].decode("utf-8", "replace")}
                return HttpRun(response.status_code,
                               problem if isinstance(problem, dict) else {"raw": problem},
                               content_type=kind)
            events = [event async for event in read_stream(response)]
            return HttpRun(200, events=tuple(events), content_type=kind)

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.client.get(path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.client.post(path, **kwargs)


def refused(result: HttpRun, status: int, code: str) -> dict[str, Any]:
    """The problem of ``result``, asserted to be ``status`` with ``code``."""
    got = (result.status, (result.problem or {}).get("code"))
    assert got == (status, code), (
        f"wanted {status} {code}, got {result.status} "
        f"{str(result.problem or result.error or result.events[-1:])[:400]}")
    assert result.content_type.startswith(PROBLEM), result.content_type
    assert result.problem is not None
    return result.problem


def finished(result: HttpRun, outcome: str | None = None) -> dict[str, Any]:
    """The RUN_FINISHED event ending ``result`` (with ``outcome.type`` when given)."""
    ending = result.ending
    got = (result.status, ending["type"] if ending is not None else None)
    assert got == (200, "RUN_FINISHED"), (
        f"wanted a finished run, got {result.status} "
        f"{str(result.problem or result.error or result.events[-1:])[:400]}")
    assert ending is not None
    if outcome is not None:
        assert (ending.get("outcome") or {}).get("type", "success") == outcome, ending
    return ending


async def approval_flow(tenant: Tenant, thread_id: str, timeout_s: float = 30.0) -> None:
    """The README's tour on ``thread_id``: interrupted for approval, approved, finished."""
    first = await tenant.run("approval", run_input(thread_id, f"{thread_id}-r1",
                                                   text="Clean up /tmp"), timeout_s=timeout_s)
    ending = finished(first, "interrupt")
    interrupts = ending["outcome"]["interrupts"]
    assert [i.get("reason") for i in interrupts] == ["tool_approval"], interrupts
    second = await tenant.run("approval", resume_all(thread_id, f"{thread_id}-r2", interrupts,
                                                     {"approved": True}), timeout_s=timeout_s)
    finished(second, "success")
    assert any(e.get("type") == "CUSTOM" and e.get("name") == "agui-relay.effect"
               for e in second.events), "the approved tool was not executed"
