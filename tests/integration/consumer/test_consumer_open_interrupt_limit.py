"""A tenant whose threads hold ``AGUI_MAX_OPEN_INTERRUPTS`` gets no new run until it answers.

Every open interrupt is held in memory by each consumer instance's inbox
index, by the gatekeeper's census and by the notifier's book until it is
answered; a tenant opening them without end could run each out of memory.
With API keys on and a limit of 2, tenant a's threads hold two: its new run
is refused ``429 too_many_open_interrupts`` and never published, while its
resume (which answers) and tenant b's new run are published; once a's
answer shows in the thread view, a's new runs pass again.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from ag_ui.core import Interrupt
from consumer_harness import AGENT, Backstage, run_input, serving

from contracts import OpenInterrupt, ThreadState
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOKEN_A = f"key-a-{uuid.uuid4().hex}"
TOKEN_B = f"key-b-{uuid.uuid4().hex}"
A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}


def interrupted(thread: str, *ids: str, principal: str = "tenant-a") -> ThreadState:
    return ThreadState(
        thread_id=thread, status="interrupted" if ids else "idle", agent=AGENT,
        principal=principal, run_id="run-1", interrupted_run_id="run-1" if ids else None,
        recent_run_ids=["run-1"],
        open_interrupts=[OpenInterrupt(run_id="run-1", interrupt=Interrupt(
            id=i, reason="tool_approval")) for i in ids])


async def test_new_runs_wait_for_answers_past_the_limit_and_resumes_never_do(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    one, two = f"one-{uuid.uuid4().hex[:8]}", f"two-{uuid.uuid4().hex[:8]}"
    await backstage.write_state(interrupted(one, "i1"), one)
    await backstage.write_state(interrupted(two, "i2"), two)
    async with serving(kafka, api_keys=f"{TOKEN_A}=tenant-a,{TOKEN_B}=tenant-b",
                       max_open_interrupts=2) as app:
        async with asyncio.timeout(20):
            while app.relay.runs.open_interrupts is None or \
                    app.relay.runs.open_interrupts("tenant-a") < 2:
                await asyncio.sleep(0.05)

        refused = await app.http.post(f"/agents/{AGENT}", json=run_input(), headers=A)
        assert refused.status_code == 429, refused.text
        problem = refused.json()
        assert problem["code"] == "too_many_open_interrupts"
        assert (problem["openInterrupts"], problem["limit"]) == (2, 2)
        assert "GET /interrupts" in problem["detail"]
        assert "retry-after" not in refused.headers

        # another tenant's new run is published (the first request on the topic)
        other = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=run_input(),
                                                  headers=B))
        request = await backstage.next_request()
        assert request.principal == "tenant-b"
        await backstage.decide(request, "rejected", code="thread_busy")
        assert (await other).status_code == 409

        # a's resume answers: published, past the limit
        answer = run_input(one, resume=[{"interruptId": "i1", "status": "cancelled"}])
        resuming = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=answer,
                                                     headers=A))
        request = await backstage.next_request()
        assert (request.principal, request.input.thread_id) == ("tenant-a", one)
        await backstage.decide(request, "rejected", code="thread_busy")
        assert (await resuming).status_code == 409

        # once an answer shows, a's new runs pass again
        await backstage.write_state(interrupted(one), one)
        async with asyncio.timeout(20):
            while app.relay.runs.open_interrupts("tenant-a") > 1:
                await asyncio.sleep(0.05)
        fresh = run_input()
        starting = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=fresh,
                                                     headers=A))
        request = await backstage.next_request()
        assert request.input.thread_id == fresh["threadId"]
        await backstage.decide(request, "rejected", code="thread_busy")
        assert (await starting).status_code == 409
    counted = app.relay.metrics.requests.labels("too_many_open_interrupts")._value.get()
    assert counted == 1
