"""``GET /threads/{threadId}/audit`` on the real broker, gatekeeper and producer worker.

Tenant a runs the ``approval`` agent (one interrupt), then resolves it; the
thread's audit shows the interrupt as raised (run, agent, reason, message,
``responseSchema``) and then resolved by tenant a, when, with the sha256
digest of the payload's canonical JSON. Tenant b asking for that audit gets
the same 404 document as for an id nobody used, but for the id. And a
thread whose id holds ``/`` (asked as ``%2F``), whose interrupt the expiry
policy cancelled, reads ``expired``, answered by ``policy:expiry``.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from backend import backend
from consumer_harness import AGENT, Backstage, data_values, finished, run_input, serving, started

from contracts import Decision, ThreadState, encode
from services.agui.audit import digest
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOKEN_A = f"key-a-{uuid.uuid4().hex}"
TOKEN_B = f"key-b-{uuid.uuid4().hex}"
A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}
KEYS = f"{TOKEN_A}=tenant-a,{TOKEN_B}=tenant-b"


async def _run(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await http.post("/agents/approval", json=body, headers=A)
    assert response.status_code == 200, response.text
    last: dict[str, Any] = orjson.loads(data_values(response.content)[-1])
    assert last["type"] == "RUN_FINISHED", last
    return last


async def test_the_audit_shows_the_interrupt_raised_then_resolved_by_its_tenant(
        kafka: KafkaSettings, tmp_path: Path) -> None:
    thread = f"audit-{uuid.uuid4().hex[:8]}"
    async with backend(kafka, tmp_path), serving(kafka, api_keys=KEYS) as app:
        first = run_input(thread)
        end = await _run(app.http, first)
        [raised] = end["outcome"]["interrupts"]
        answer = {"approved": True}
        second = run_input(thread, resume=[{"interruptId": raised["id"], "status": "resolved",
                                            "payload": answer}])
        await _run(app.http, second)

        response = await app.http.get(f"/threads/{thread}/audit", headers=A)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert body["threadId"] == thread
        [entry] = body["interrupts"]
        assert entry["interruptId"] == raised["id"]
        assert (entry["status"], entry["runId"], entry["agent"]) == (
            "resolved", first["runId"], "approval")
        assert entry["reason"] == raised["reason"]
        assert entry["message"] == raised["message"]
        assert entry["responseSchema"] == raised["responseSchema"]
        assert entry["toolCallId"] == raised["toolCallId"]
        given = entry["answer"]
        assert given["status"] == "resolved"
        assert given["runId"] == second["runId"]
        assert given["by"] == "tenant-a"
        assert given["digest"] == digest(answer)
        assert given["at"] >= entry["raisedAt"]

        unused = f"audit-{uuid.uuid4().hex[:8]}"
        foreign = await app.http.get(f"/threads/{thread}/audit", headers=B)
        nobody = await app.http.get(f"/threads/{unused}/audit", headers=B)
        assert (foreign.status_code, nobody.status_code) == (404, 404)
        assert foreign.json()["code"] == "unknown_thread"
        assert foreign.headers["content-type"] == nobody.headers["content-type"]
        assert foreign.content.replace(thread.encode(), b"ID") == \
            nobody.content.replace(unused.encode(), b"ID")


async def test_an_interrupt_the_expiry_policy_cancelled_reads_expired_through_a_raw_path(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread = f"parent/child-{uuid.uuid4().hex[:8]}"
    await backstage.write_state(ThreadState(
        thread_id=thread, status="idle", agent=AGENT, principal="tenant-a", run_id="run-2",
        recent_run_ids=["run-1", "run-2"], updated_at=datetime.now(UTC)), thread)
    interrupt = {"id": "i1", "reason": "tool_approval", "expiresAt": "2026-01-01T00:00:00Z"}
    await backstage.emit(thread, "run-1", [started(thread, "run-1"), finished(
        thread, "run-1", outcome={"type": "interrupt", "interrupts": [interrupt]})])
    cancel = {"interruptId": "i1", "status": "cancelled",
              "metadata": {"agui-relay.principal": "policy:expiry"}}
    await backstage.emit(thread, "run-2", [
        {**started(thread, "run-2"), "input": run_input(thread, "run-2", resume=[cancel])},
        finished(thread, "run-2")])
    decided = Decision(request_id="expiry-1", thread_id=thread, run_id="run-2", agent=AGENT,
                       verdict="admitted", message="expired", interrupt_ids=["i1"],
                       principal="tenant-a", policy="expiry", decided_at=datetime.now(UTC))
    await backstage.producer.send_and_wait(kafka.topics.decisions, encode(decided),
                                           key=thread.encode())
    async with serving(kafka, api_keys=KEYS) as app:
        async with asyncio.timeout(20):
            while app.relay.threads.get(thread) is None:
                await asyncio.sleep(0.05)
        path = f"/threads/{thread.replace('/', '%2F')}/audit"
        response = await app.http.get(path, headers=A)
        assert response.status_code == 200, response.text
        [entry] = response.json()["interrupts"]
        assert (entry["interruptId"], entry["status"], entry["expiresAt"]) == (
            "i1", "expired", "2026-01-01T00:00:00Z")
        assert entry["answer"] == {"status": "cancelled", "runId": "run-2",
                                   "by": "policy:expiry", "policy": "expiry",
                                   "at": int(decided.decided_at.timestamp() * 1000)}
        assert (await app.http.get(path, headers=B)).status_code == 404
