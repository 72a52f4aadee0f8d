"""The consumer service's routes against the real gatekeeper and producer worker.

Through the whole relay (processes): a second run on a busy thread is
refused 409 by the real gatekeeper; cancel stops a running run, whose POST
stream ends with the producer's cancelled outcome; the replay of that run
is byte for byte the POST stream; the thread view follows along.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import orjson
import pytest
from relay_system import RelaySystem

pytestmark = pytest.mark.interop


def data_lines(body: bytes) -> list[bytes]:
    return [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]


def slow_input(thread: str, run: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [],
            "forwardedProps": {"script": {"text": "working on it", "delayMs": 60_000}}}


async def test_busy_cancel_replay_and_thread_view_through_the_relay(system: RelaySystem) -> None:
    thread = f"sys-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=system.url, timeout=60) as http:
        first = asyncio.create_task(http.post("/agents/scripted",
                                              json=slow_input(thread, "run-1")))
        async with asyncio.timeout(30):
            while (await http.get(f"/threads/{thread}")).status_code == 404:
                await asyncio.sleep(0.1)
        running = (await http.get(f"/threads/{thread}")).json()
        busy = await http.post("/agents/scripted", json=slow_input(thread, "run-2"))
        cancel = await http.post(f"/threads/{thread}/runs/run-1/cancel")
        posted = await first
        replay = await http.get(f"/threads/{thread}/runs/run-1/events")
        resumed_from = await http.get(f"/threads/{thread}/runs/run-1/events",
                                      headers={"Last-Event-ID": "1"})
        async with asyncio.timeout(30):
            while (await http.get(f"/threads/{thread}")).json()["status"] != "idle":
                await asyncio.sleep(0.1)
    assert running["status"] == "running"
    assert running["currentRunId"] == "run-1"
    assert busy.status_code == 409
    assert busy.json()["code"] == "thread_busy"
    assert cancel.status_code == 202
    events = [orjson.loads(v) for v in data_lines(posted.content)]
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}
    assert data_lines(replay.content) == data_lines(posted.content)
    assert data_lines(resumed_from.content) == data_lines(posted.content)[2:]
