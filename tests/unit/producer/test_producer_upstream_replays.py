"""Replayed runs ahead of the requested one: what is kept and said of them is bounded.

``RunSelector`` had kept every replayed run's ``runId`` whole, for the worker's log line
and the message of a stream that ended before the requested run: memory, that INFO line
and the run's ``RUN_ERROR`` grew with the number and size of the runs an upstream
replayed (5,000 short ids made a 90,000-character message; 100 ids of 20 KB a 2 MB
line). They are counted now, the last few named, each cut as messages cut ids.
"""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from ag_ui.core import RunAgentInput

from services.producer.upstream.client import UpstreamAgent
from services.producer.upstream.config import UpstreamConfig
from services.producer.upstream.runs import RunSelector

pytestmark = pytest.mark.unit


def replayed(runs: RunSelector, run_id: str) -> None:
    runs.take({"type": "RUN_STARTED", "threadId": "t1", "runId": run_id})
    runs.take({"type": "RUN_FINISHED", "threadId": "t1", "runId": run_id})


def test_replayed_runs_ahead_of_the_requested_one_hold_bounded_memory() -> None:
    runs = RunSelector("t1", "r1")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):
            replayed(runs, f"old-{n}-" + "x" * 50_000)  # a 50 KB runId
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 100_000, f"the run selector holds {held:,} bytes after 200 replayed runs"


def test_the_failure_of_a_stream_that_only_replays_counts_them_and_names_the_last() -> None:
    runs = RunSelector("t1", "r1")
    for n in range(5_000):
        replayed(runs, f"old-run-{n:06d}")
    message = runs.unended()
    assert len(message) < 500, f"{len(message):,} characters: {message[:200]}…"
    assert "5000 runs" in message
    assert "'old-run-004997', 'old-run-004998', 'old-run-004999'" in message
    assert message.count("old-run-") < 10, message


async def test_the_replayed_runs_log_line_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    big = "x" * 20_000
    ids = {"threadId": "t1", "runId": "r1"}

    async def body() -> AsyncIterator[bytes]:
        for n in range(100):
            old = {"threadId": "t1", "runId": f"old-{n}-{big}"}
            yield b"data: " + orjson.dumps({"type": "RUN_STARTED", **old}) + b"\n\n"
            yield b"data: " + orjson.dumps({"type": "RUN_FINISHED", **old}) + b"\n\n"
        for kind in ("RUN_STARTED", "RUN_FINISHED"):
            yield b"data: " + orjson.dumps({"type": kind, **ids}) + b"\n\n"

    up = UpstreamAgent(UpstreamConfig(name="up", url="http://upstream.test/agui"))
    up._client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda _: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                 content=body())))
    run_input = RunAgentInput(thread_id="t1", run_id="r1", state={}, messages=[], tools=[],
                              context=[], forwarded_props={})
    caplog.set_level(logging.INFO, logger="services.producer.upstream.client")
    out = [item async for item in up(run_input, None)]  # type: ignore[arg-type]
    assert out == [{"type": "RUN_FINISHED", **ids}]
    [line] = [r.getMessage() for r in caplog.records if "replayed" in r.getMessage()]
    assert len(line) < 1_000, f"a line of {len(line):,} characters: {line[:200]}…"
    assert "100 runs" in line
