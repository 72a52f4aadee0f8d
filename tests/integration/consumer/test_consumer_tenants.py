"""Another tenant's thread and a thread nobody used answer alike, byte for byte.

With API keys on, tenant b asks about tenant a's interrupted thread and
about an id nobody used, on every route that names a thread: GET, replay,
cancel and a POST carrying resume entries. Each pair of answers is the same
document but for the id. The POST is where they differed: the foreign one
was refused here (404), the unused one was published and the gatekeeper's
``unknown_interrupt`` came back as a 422; now that rejection of a thread
the view had never seen run reads as the 404 too. The foreign request is
still never published (the first request on the topic is the unused id's).
"""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from ag_ui.core import Interrupt
from consumer_harness import AGENT, Backstage, run_input, serving

from contracts import OpenInterrupt, ThreadState
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOKEN_A = f"key-a-{uuid.uuid4().hex}"
TOKEN_B = f"key-b-{uuid.uuid4().hex}"
B = {"Authorization": f"Bearer {TOKEN_B}"}


def resume(thread: str) -> dict[str, object]:
    return run_input(thread, resume=[{"interruptId": "i1", "status": "resolved",
                                      "payload": {"approved": True}}])


async def answers(http: httpx.AsyncClient, backstage: Backstage,
                  thread: str) -> dict[str, httpx.Response]:
    out = {"GET thread": await http.get(f"/threads/{thread}", headers=B),
           "replay": await http.get(f"/threads/{thread}/runs/run-1/events", headers=B),
           "cancel": await http.post(f"/threads/{thread}/runs/run-1/cancel", headers=B)}
    task = asyncio.create_task(http.post(f"/agents/{AGENT}", json=resume(thread), headers=B))
    done, _ = await asyncio.wait({task}, timeout=1.0)
    if not done:  # published: answer as the gatekeeper answers resume entries on a new id
        request = await backstage.next_request()
        assert request.input.thread_id == thread
        await backstage.decide(request, "rejected", code="unknown_interrupt",
                               interrupt_ids=["i1"],
                               message="resume names 'i1' but no interrupt is open")
    out["POST resume"] = await task
    return out


async def test_a_foreign_thread_and_an_unused_id_answer_alike_on_every_route(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    foreign, unused = f"own-{uuid.uuid4().hex[:8]}", f"new-{uuid.uuid4().hex[:8]}"
    await backstage.write_state(ThreadState(
        thread_id=foreign, status="interrupted", agent=AGENT, principal="tenant-a",
        run_id="run-1", interrupted_run_id="run-1", recent_run_ids=["run-1"],
        open_interrupts=[OpenInterrupt(run_id="run-1", interrupt=Interrupt(
            id="i1", reason="tool_approval"))]), foreign)
    keys = f"{TOKEN_A}=tenant-a,{TOKEN_B}=tenant-b"
    async with serving(kafka, api_keys=keys) as app:
        async with asyncio.timeout(20):
            while app.relay.threads.get(foreign) is None:
                await asyncio.sleep(0.05)
        hidden = await answers(app.http, backstage, foreign)
        unknown = await answers(app.http, backstage, unused)
        owner = await app.http.get(f"/threads/{foreign}",
                                   headers={"Authorization": f"Bearer {TOKEN_A}"})
        twice = await app.http.get(f"/threads/{foreign}", headers=[
            ("Authorization", f"Bearer {TOKEN_A}"), ("Authorization", f"Bearer {TOKEN_B}")])
    assert owner.status_code == 200
    assert (twice.status_code, twice.json()["code"]) == (400, "duplicate_header")
    for route in hidden:
        mine, theirs = hidden[route], unknown[route]
        assert mine.status_code == theirs.status_code == 404, (route, mine.text, theirs.text)
        assert mine.headers["content-type"] == theirs.headers["content-type"]
        assert mine.content.replace(foreign.encode(), b"<id>") == theirs.content.replace(
            unused.encode(), b"<id>"), route
        assert mine.json()["code"] == "unknown_thread"
