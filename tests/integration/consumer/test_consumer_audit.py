"""``GET /threads/{threadId}/audit`` on the real broker, gatekeeper and producer worker,
and who answered travelling from the API key to the decision to the agent's ``RunContext``.

Tenant a has two named keys, ``tenant-a#alice`` and ``tenant-a#bob``. Alice
runs the ``approval`` agent (one interrupt) naming herself the only approver;
Bob, whose key opens tenant a's thread, approves (claiming to be Alice in the
entry's metadata): the run is admitted, but the agent sees ``tenant-a#bob``
(the gatekeeper's word, not the client's) and refuses. The audit shows the
interrupt as raised (run, agent, reason, message, ``responseSchema``) and
then resolved by ``tenant-a#bob``, when, with the sha256 digest of the
payload's canonical JSON; on a second thread Alice's own approval executes
and reads ``tenant-a#alice``. Tenant b asking for that audit gets the same
404 document as for an id nobody used, but for the id. And a thread whose id
holds ``/`` (asked as ``%2F``), whose interrupt the expiry policy cancelled,
reads ``expired``, answered by ``policy:expiry``.
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
from contracts.records import PRINCIPAL_KEY
from services.agui.audit import digest
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOKEN_A = f"key-a-{uuid.uuid4().hex}"
TOKEN_BOB = f"key-a2-{uuid.uuid4().hex}"
TOKEN_B = f"key-b-{uuid.uuid4().hex}"
A = {"Authorization": f"Bearer {TOKEN_A}"}
BOB = {"Authorization": f"Bearer {TOKEN_BOB}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}
KEYS = f"{TOKEN_A}=tenant-a#alice,{TOKEN_BOB}=tenant-a#bob,{TOKEN_B}=tenant-b"


async def _run(http: httpx.AsyncClient, body: dict[str, Any],
               headers: dict[str, str]) -> list[dict[str, Any]]:
    response = await http.post("/agents/approval", json=body, headers=headers)
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = [orjson.loads(d) for d in data_values(response.content)]
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events


def _tool_result(events: list[dict[str, Any]]) -> Any:
    return orjson.loads(next(e for e in events if e["type"] == "TOOL_CALL_RESULT")["content"])


async def _approve(http: httpx.AsyncClient, thread: str, starter: dict[str, str],
                   approver: dict[str, str], answer: dict[str, Any]
                   ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], Any]:
    """``starter`` asks (only Alice may approve), ``approver`` approves claiming Alice."""
    first = run_input(thread, forwardedProps={"paths": ["/a"], "approvers": ["tenant-a#alice"]})
    [raised] = (await _run(http, first, starter))[-1]["outcome"]["interrupts"]
    second = run_input(thread, resume=[{"interruptId": raised["id"], "status": "resolved",
                                        "payload": answer,
                                        "metadata": {PRINCIPAL_KEY: "tenant-a#alice"}}])
    result = _tool_result(await _run(http, second, approver))
    return first, second, raised, result


async def _audit(http: httpx.AsyncClient, thread: str, headers: dict[str, str]
                 ) -> list[dict[str, Any]]:
    response = await http.get(f"/threads/{thread}/audit", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["threadId"] == thread
    entries: list[dict[str, Any]] = body["interrupts"]
    return entries


async def test_two_keys_of_one_tenant_are_told_apart_from_the_key_to_the_agent_and_audit(
        kafka: KafkaSettings, tmp_path: Path) -> None:
    thread = f"audit-{uuid.uuid4().hex[:8]}"
    answer = {"approved": True}
    async with backend(kafka, tmp_path), serving(kafka, api_keys=KEYS) as app:
        first, second, raised, result = await _approve(app.http, thread, A, BOB, answer)
        assert result == {"refused": True, "status": "resolved", "by": "tenant-a#bob",
                          "reason": "not an approver"}  # the right tenant, the wrong person
        cancel = await app.http.post(f"/threads/{thread}/runs/{second['runId']}/cancel",
                                     headers=BOB)
        assert (cancel.status_code, cancel.json()["requestedBy"]) == (202, "tenant-a#bob")

        [entry] = await _audit(app.http, thread, A)
        assert await _audit(app.http, thread, BOB) == [entry]  # one tenant, one thread
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
        assert given["by"] == "tenant-a#bob"
        assert given["digest"] == digest(answer)
        assert given["at"] >= entry["raisedAt"]

        own = f"audit-{uuid.uuid4().hex[:8]}"
        *_, executed = await _approve(app.http, own, BOB, A, answer)
        assert list(executed) == ["deleted"]  # executed (its paths would come from history)
        [mine] = await _audit(app.http, own, BOB)
        assert (mine["status"], mine["answer"]["by"]) == ("resolved", "tenant-a#alice")

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
