"""The upstream bridge's run end: a late ``RUN_ERROR`` after ``RUN_FINISHED`` fails the run.

AG-UI 1.0 rule 36: a failure that surfaced after success was reported comes as a
``RUN_ERROR`` after ``RUN_FINISHED``, and the consumer MUST treat the run as failed.
The bridge reads on after ``RUN_FINISHED`` until the upstream closes its stream, for
at most ``LATE_ERROR_GRACE_S``: a stream closed at once costs no wait, one left open
costs the grace, a late error ends the run with it. Each upstream is an
``httpx.MockTransport`` handler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import RunAgentInput

from services.producer.errors import RunFailedError
from services.producer.upstream.client import UpstreamAgent
from services.producer.upstream.config import UpstreamConfig
from services.producer.upstream.runs import LATE_ERROR_GRACE_S

pytestmark = pytest.mark.unit

SSE = {"content-type": "text/event-stream"}
IDS = {"threadId": "t1", "runId": "r1"}
FINISHED = {"type": "RUN_FINISHED", **IDS, "outcome": {"type": "success"}}
LATE = {"type": "RUN_ERROR", "code": "flush_failed", "message": "the ledger write failed"}


def frame(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


async def sent(*events: dict[str, Any] | float) -> AsyncIterator[bytes]:
    """The events as frames; a number is a pause of that many seconds."""
    for event in events:
        if isinstance(event, float):
            await asyncio.sleep(event)
        else:
            yield frame(event)


async def run(*events: dict[str, Any] | float) -> tuple[list[dict[str, Any]], float]:
    """What the bridge yields for an upstream sending ``events``, and how long it took."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=SSE, content=sent(*events))
    up = UpstreamAgent(UpstreamConfig(name="up", url="http://upstream.test/agui"))
    up._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    run_input = RunAgentInput(thread_id="t1", run_id="r1", state={}, messages=[], tools=[],
                              context=[], forwarded_props={})
    began = time.monotonic()
    out = [item async for item in up(run_input, None)]  # type: ignore[arg-type]
    return out, time.monotonic() - began


async def test_a_stream_closed_after_run_finished_ends_the_run_at_once() -> None:
    out, took = await run({"type": "RUN_STARTED", **IDS}, FINISHED)
    assert out == [FINISHED]
    assert took < LATE_ERROR_GRACE_S


@pytest.mark.parametrize("pause", [0.0, LATE_ERROR_GRACE_S / 5])
async def test_a_late_run_error_ends_the_run_failed_instead(pause: float) -> None:
    out, _ = await run({"type": "RUN_STARTED", **IDS}, FINISHED, pause, LATE)
    assert [e["type"] for e in out] == ["RUN_ERROR"]
    assert out[0]["code"] == "upstream.flush_failed"
    assert out[0]["message"] == "after its RUN_FINISHED: the ledger write failed"


async def test_a_stream_left_open_ends_the_run_after_the_grace() -> None:
    out, took = await run(FINISHED, 30.0)
    assert out == [FINISHED]
    assert LATE_ERROR_GRACE_S <= took < LATE_ERROR_GRACE_S + 2


async def test_a_late_error_past_the_grace_is_not_read() -> None:
    out, _ = await run(FINISHED, LATE_ERROR_GRACE_S + 0.5, LATE)
    assert out == [FINISHED]


async def test_a_next_run_after_run_finished_is_not_read() -> None:
    out, _ = await run(FINISHED, {"type": "RUN_STARTED", "threadId": "t1", "runId": "r2"},
                       LATE)
    assert out == [FINISHED]


async def test_another_event_after_run_finished_is_refused() -> None:
    text = {"type": "TEXT_MESSAGE_START", "messageId": "m9", "role": "assistant"}
    with pytest.raises(RunFailedError, match="TEXT_MESSAGE_START after run 'r1' finished") \
            as refused:
        await run(FINISHED, text)
    assert refused.value.code == "upstream_protocol"
