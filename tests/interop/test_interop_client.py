"""The reference client, @ag-ui/client 1.0.0, against the running relay.

A Node script (``agui_client_flows.mjs``) drives ``HttpAgent`` with the
client's own verification on: the ``approval`` agent to its interrupt and
through ``buildResumeArray`` to success; an expired ``scripted`` interrupt
refused when answered and let through when cancelled; a resume that leaves
an interrupt uncovered refused by the client before it sends anything. Then
the same partial resume, sent raw over HTTP, gets the relay's own 422.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from relay_system import RelaySystem

from contracts import EVENT_DECODER

pytestmark = pytest.mark.interop

NODE_TIMEOUT_S = 120.0


async def run_node(script: Path, url: str) -> tuple[int, dict[str, Any], str]:
    process = await asyncio.create_subprocess_exec(
        "node", script.name, url, cwd=script.parent,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), NODE_TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    report = orjson.loads(out) if out.strip() else {}
    return process.returncode, report, err.decode()


@pytest.fixture(scope="module")
async def client_report(system: RelaySystem, node_client: Path) -> dict[str, Any]:
    code, report, stderr = await run_node(node_client / "agui_client_flows.mjs", system.url)
    assert code == 0, f"{orjson.dumps(report.get('flows')).decode()}\n{stderr}\n{system.logs()}"
    return report


def test_approval_interrupt_answered_with_build_resume_array_finishes_success(
        client_report: dict[str, Any]) -> None:
    flow = client_report["flows"]["approval"]
    assert flow["ok"]
    assert flow["outcomes"] == ["interrupt", "success"]
    assert flow["interrupt"]["reason"] == "tool_approval"
    assert flow["resume"] == [{"interruptId": flow["interrupt"]["id"], "status": "resolved",
                               "payload": {"approved": True}}]


def test_an_expired_interrupt_is_refused_answered_and_passes_cancelled(
        client_report: dict[str, Any]) -> None:
    flow = client_report["flows"]["expired"]
    assert flow["ok"]
    assert "can no longer be answered" in flow["refusedAnswer"]
    assert flow["outcomes"] == ["interrupt", "success"]


def test_the_client_itself_refuses_a_resume_leaving_an_interrupt_uncovered(
        client_report: dict[str, Any]) -> None:
    flow = client_report["flows"]["uncovered"]
    assert flow["ok"]
    assert flow["refusedBuild"] == "buildResumeArray: missing responses for open interrupts: b"
    assert flow["refusedRun"] == "Thread has 1 pending interrupt(s) not addressed by resume: b"


def test_the_client_raised_no_warning_and_no_error(client_report: dict[str, Any]) -> None:
    assert client_report["warnings"] == []
    assert client_report["errors"] == []
    assert {r["status"] for r in client_report["requests"]} == {200}


def test_every_event_the_client_processed_parses_with_the_protocol_models(
        client_report: dict[str, Any]) -> None:
    events = [e["event"] for e in client_report["events"]]
    assert len(events) > 10
    for event in events:
        EVENT_DECODER.validate_python(event)


async def test_a_raw_partial_resume_gets_422_and_a_full_one_passes(
        system: RelaySystem, client_report: dict[str, Any]) -> None:
    thread = client_report["flows"]["uncovered"]["threadId"]
    async with httpx.AsyncClient(base_url=system.url, timeout=30) as http:
        state = (await http.get(f"/threads/{thread}")).json()
        assert state["status"] == "interrupted"
        assert [o["interrupt"]["id"] for o in state["openInterrupts"]] == ["a", "b"]
        partial = {"threadId": thread, "runId": f"raw-{uuid.uuid4().hex[:8]}", "messages": [],
                   "resume": [{"interruptId": "a", "status": "resolved", "payload": 1}]}
        refused = await http.post("/agents/scripted", json=partial,
                                  headers={"Accept": "text/event-stream"})
        after = (await http.get(f"/threads/{thread}")).json()
        full = {**partial, "runId": f"raw-{uuid.uuid4().hex[:8]}",
                "resume": [*partial["resume"], {"interruptId": "b", "status": "cancelled"}]}
        admitted = await http.post("/agents/scripted", json=full)
    assert refused.status_code == 422
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["code"] == "uncovered_interrupts"
    assert problem["interruptIds"] == ["b"]
    assert b"data:" not in refused.content
    assert after["status"] == "interrupted"  # nothing was dispatched
    assert admitted.status_code == 200
    events = [orjson.loads(line[6:]) for line in admitted.content.split(b"\n")
              if line.startswith(b"data: ")]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1].get("outcome", {"type": "success"}) == {"type": "success"}
