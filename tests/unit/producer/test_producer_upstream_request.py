"""The request an upstream agent sends for a run: its headers, and when it is sent again.

The upstream is an ``httpx.MockTransport`` handler; the agent is driven as the runner
drives it (an async generator of wire events).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import RunAgentInput

from services.producer.errors import RunFailedError
from services.producer.upstream.client import UpstreamAgent
from services.producer.upstream.config import UpstreamConfig
from services.producer.upstream.retry import RETRY_BACKOFF_S, backoff, retry_after
from services.runtime import tracing

pytestmark = pytest.mark.unit

SSE = {"content-type": "text/event-stream"}
FINISHED = b"data: " + orjson.dumps({"type": "RUN_FINISHED", "threadId": "t1",
                                     "runId": "r1"}) + b"\n\n"


def agent(handler: Callable[[httpx.Request], httpx.Response], **settings: Any) -> UpstreamAgent:
    made = UpstreamAgent(UpstreamConfig(name="up", url="http://upstream.test/agui",
                                        **settings))
    made._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return made


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def finishing(seen: list[httpx.Request]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers=SSE, content=chunks(FINISHED))
    return handler


async def drain(up: UpstreamAgent) -> list[dict[str, Any]]:
    run_input = RunAgentInput(thread_id="t1", run_id="r1", state={}, messages=[], tools=[],
                              context=[], forwarded_props={})
    return [item async for item in up(run_input, None)]  # type: ignore[arg-type]


async def test_the_upstream_request_continues_the_runs_trace() -> None:
    """README: a W3C traceparent travels from the HTTP request to every event the producer
    writes, one span per hop. The upstream is one more hop; its request carried none, so
    the upstream's own spans started a trace of their own."""
    seen: list[httpx.Request] = []
    hop = tracing.start()
    with tracing.within(hop):
        await drain(agent(finishing(seen)))
    sent = tracing.parse(seen[0].headers.get("traceparent"))
    assert sent is not None, dict(seen[0].headers)
    assert sent.trace_id == hop.trace_id
    assert sent.span_id != hop.span_id


async def test_the_runs_traceparent_replaces_a_configured_one() -> None:
    seen: list[httpx.Request] = []
    hop = tracing.start()
    with tracing.within(hop):
        await drain(agent(finishing(seen),
                          headers={"TraceParent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}))
    (sent,) = seen[0].headers.get_list("traceparent")
    assert sent.startswith(f"00-{hop.trace_id}-")


async def test_a_run_outside_any_trace_sends_no_traceparent() -> None:
    seen: list[httpx.Request] = []
    await drain(agent(finishing(seen)))
    assert "traceparent" not in seen[0].headers
    assert seen[0].headers["accept"] == "text/event-stream"


def refusing(at: list[float], status: int, retry: str | None,
             refusals: int = 1) -> Callable[[httpx.Request], httpx.Response]:
    """``status`` with ``Retry-After: retry`` ``refusals`` times, then the run."""
    def handler(_: httpx.Request) -> httpx.Response:
        at.append(time.monotonic())
        if len(at) <= refusals:
            return httpx.Response(status, headers={"retry-after": retry} if retry else {},
                                  content=chunks(b"busy"))
        return httpx.Response(200, headers=SSE, content=chunks(FINISHED))
    return handler


@pytest.mark.parametrize("status", [503, 429])
async def test_a_refusal_with_retry_after_is_not_retried_sooner_than_it_asks(
        status: int) -> None:
    """``Retry-After: 1``: a 503 was tried again 0.2 s and 0.6 s after the first answer
    (the worker's own backoff), inside the second the upstream asked to be left alone
    (RFC 9110 section 10.2.3); a 429 was never tried again."""
    at: list[float] = []
    await drain(agent(refusing(at, status, "1"), retries=2))
    assert len(at) == 2
    assert at[1] - at[0] >= 0.9, f"retried {at[1] - at[0]:.2f}s after a Retry-After: 1"


async def test_a_retry_after_in_the_past_or_unreadable_leaves_the_backoff() -> None:
    at: list[float] = []
    await drain(agent(refusing(at, 503, "Wed, 21 Oct 2015 07:28:00 GMT"), retries=1))
    assert len(at) == 2
    assert 0.15 <= at[1] - at[0] < 0.9


async def test_a_retry_after_past_the_runs_deadline_ends_the_run_at_once() -> None:
    at: list[float] = []
    started = time.monotonic()
    with pytest.raises(RunFailedError) as failed:
        await drain(agent(refusing(at, 503, "30"), retries=2, run_timeout_s=5))
    assert time.monotonic() - started < 1
    assert len(at) == 1
    assert failed.value.code == "upstream_status"
    assert "503: busy; it asked to be tried again in 30s, past the end of the run's 5s" in (
        failed.value.message)


@pytest.mark.parametrize(("value", "seconds"), [
    (None, None), ("120", 120.0), (" 0 ", 0.0), ("soon", None), ("-1", None), ("1.5", None),
    ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0), ("Wed, 21 Oct 2015 07:28:30 -0000", 30.0),
    ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0), ("Wed, 99 Oct 2015 07:28:00 GMT", None)])
def test_retry_after_is_read_as_seconds_or_an_http_date(value: str | None,
                                                        seconds: float | None) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after(value, now) == seconds


def test_the_backoff_doubles_from_its_first_wait() -> None:
    assert [backoff(n) for n in (1, 2, 3)] == [RETRY_BACKOFF_S, 2 * RETRY_BACKOFF_S,
                                              4 * RETRY_BACKOFF_S]
