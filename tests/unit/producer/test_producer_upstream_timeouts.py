"""An upstream's stream cut by a timeout: the message names the limit that ran out.

``IDLE_TIMEOUT_S`` ends a run whose upstream sent nothing for that long;
``RUN_TIMEOUT_S`` one that has not ended in that time, however much it was sending. Both
had been said "sent nothing": an operator read a silent upstream where a chatty one had
run past the run's limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import RunAgentInput

from services.producer.errors import RunFailedError
from services.producer.upstream.client import UpstreamAgent
from services.producer.upstream.config import UpstreamConfig

pytestmark = pytest.mark.unit


def frame(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


async def streaming(every_s: float, count: int) -> AsyncIterator[bytes]:
    yield frame({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"})
    yield frame({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
    for n in range(count):
        await asyncio.sleep(every_s)
        yield frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"{n} "})
    await asyncio.sleep(3600)
    yield b""


async def failure(every_s: float, count: int, **settings: Any) -> RunFailedError:
    up = UpstreamAgent(UpstreamConfig(name="up", url="http://upstream.test/agui", **settings))
    up._client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda _: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                 content=streaming(every_s, count))))
    run_input = RunAgentInput(thread_id="t1", run_id="r1", state={}, messages=[], tools=[],
                              context=[], forwarded_props={})
    with pytest.raises(RunFailedError) as failed:
        async for _ in up(run_input, None):  # type: ignore[arg-type]
            pass
    assert failed.value.code == "upstream_timeout"
    return failed.value


async def test_a_run_timeout_on_a_streaming_upstream_does_not_say_it_sent_nothing() -> None:
    """An event every 0.1 s past ``RUN_TIMEOUT_S`` (1 s), the idle limit 5 s."""
    said = (await failure(0.1, 1000, run_timeout_s=1.0, idle_timeout_s=5.0)).message
    assert "sent nothing" not in said, said
    assert "within the run's 1s (AGUI_UPSTREAM_RUN_TIMEOUT_S)" in said


async def test_an_idle_timeout_says_the_upstream_sent_nothing_for_that_long() -> None:
    said = (await failure(0.05, 3, run_timeout_s=30.0, idle_timeout_s=0.3)).message
    assert "sent nothing within 0.3s (AGUI_UPSTREAM_IDLE_TIMEOUT_S)" in said, said
