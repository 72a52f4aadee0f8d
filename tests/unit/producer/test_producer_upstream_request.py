"""The request an upstream agent sends for a run: its headers, and when it is sent again.

The upstream is an ``httpx.MockTransport`` handler; the agent is driven as the runner
drives it (an async generator of wire events).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import RunAgentInput

from services.producer.upstream.client import UpstreamAgent
from services.producer.upstream.config import UpstreamConfig
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
