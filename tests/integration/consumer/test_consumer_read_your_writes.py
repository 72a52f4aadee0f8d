"""Read-your-writes: a thread read right after its run's stream ended shows that end.

The real gatekeeper and producer worker (``backend``) behind two consumer
instances in this process. Back to back, 200 runs: each ``approval`` run
(one interrupt) on a fresh thread and each ``scripted`` run (finishing) on
one shared thread are streamed from instance A; the moment the stream ends,
``GET /threads/{id}`` on A and on B must show that run and the state its end
produced, never the ``running`` state from before it (which the gatekeeper
replaces only after it has read the terminal event, tens of milliseconds
after the client did). And with the test playing the gatekeeper
(``Backstage``) and never writing the closing state, the answer after the
bound is the state the end produces, while a run not ended reads running.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from backend import backend
from consumer_harness import AGENT, Backstage, data_values, finished, serving, started

from contracts import ThreadState
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

PAIRS = 100
"""Each pair is an interrupting run and a finishing one."""


def _input(thread_id: str) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": f"run-{uuid.uuid4().hex[:10]}",
            "messages": [{"id": f"m-{uuid.uuid4().hex[:6]}", "role": "user",
                          "content": "tidy the disk"}]}


async def _run(http: httpx.AsyncClient, agent: str, body: dict[str, Any]) -> dict[str, Any]:
    """Stream one run to its end; its terminal event."""
    response = await http.post(f"/agents/{agent}", json=body)
    assert response.status_code == 200, response.text
    last: dict[str, Any] = orjson.loads(data_values(response.content)[-1])
    assert last["type"] in ("RUN_FINISHED", "RUN_ERROR"), last
    return last


async def _thread(http: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    response = await http.get(f"/threads/{thread_id}")
    assert response.status_code == 200, (thread_id, response.text)
    view: dict[str, Any] = response.json()
    return view


async def test_a_thread_read_right_after_a_stream_ended_shows_that_end(
        kafka: KafkaSettings, tmp_path: Path) -> None:
    shared = f"rw-{uuid.uuid4().hex[:8]}"
    behind: list[tuple[str, str, str, dict[str, Any]]] = []
    async with backend(kafka, tmp_path), serving(kafka) as a, serving(kafka) as b:
        for _ in range(PAIRS):
            for agent, thread_id, expected in (("approval", f"rw-{uuid.uuid4().hex[:8]}",
                                                "interrupted"),
                                               ("scripted", shared, "idle")):
                body = _input(thread_id)
                end = await _run(a.http, agent, body)
                assert end["type"] == "RUN_FINISHED", end
                for name, instance in (("A", a), ("B", b)):
                    view = await _thread(instance.http, thread_id)
                    if view.get("lastRunId") != body["runId"] or view["status"] != expected:
                        behind.append((agent, name, body["runId"], view))
    assert not behind, f"{len(behind)} reads showed a state from before the stream's end; " \
                       f"first: {behind[0]}"


async def test_with_no_closing_state_written_the_end_is_answered_from_what_it_produces(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = f"rw-{uuid.uuid4().hex[:8]}", "run-1"
    outcome = {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "confirm"}]}
    async with serving(kafka, read_your_writes_s=0.5) as app:
        await backstage.write_state(ThreadState(thread_id=thread, status="running", agent=AGENT,
                                                run_id=run, recent_run_ids=[run]), thread)
        await backstage.emit(thread, run, [started(thread, run)])
        async with asyncio.timeout(20):
            while app.relay.threads.get(thread) is None:
                await asyncio.sleep(0.02)
        going = (await app.http.get(f"/threads/{thread}")).json()
        await backstage.emit(thread, run, [finished(thread, run, outcome=outcome)], seqs=[1])
        ended = (await app.http.get(f"/threads/{thread}")).json()
    assert (going["status"], going["currentRunId"]) == ("running", run)
    assert (ended["status"], ended["lastRunId"], ended.get("interruptedRunId")) == (
        "interrupted", run, run)
    assert "currentRunId" not in ended
    assert [o["interrupt"]["id"] for o in ended["openInterrupts"]] == ["i1"]
