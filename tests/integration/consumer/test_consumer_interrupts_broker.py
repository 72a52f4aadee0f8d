"""``GET /interrupts``, its stream and a thread's history, on the real broker and app.

Backstage writes thread states (and a run's events and decision) as the
gatekeeper and producer would; two tenants ask. Each sees only its own
interrupts, in the listing and on the stream; the stream tells of an
interrupt opening, being answered and expiring; the listing carries each
gated tool call read from the events (streamed in deltas, a resent copy
dropped, or echoed by a later run's input), announced ``updated``; the
history of a thread has the tool calls' arguments and the resume input,
and is another tenant's 404.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import Interrupt
from consumer_harness import AGENT, Backstage, finished, serving, started

from contracts import OpenInterrupt, ThreadState
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOKEN_A = f"key-a-{uuid.uuid4().hex}"
TOKEN_B = f"key-b-{uuid.uuid4().hex}"
A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}
KEYS = f"{TOKEN_A}=tenant-a,{TOKEN_B}=tenant-b"


def interrupted(thread: str, principal: str, *interrupts: Interrupt, run: str = "run-1",
                started: datetime | None = None) -> ThreadState:
    return ThreadState(
        thread_id=thread, status="interrupted" if interrupts else "idle", agent=AGENT,
        principal=principal, run_id=run,
        interrupted_run_id=run if interrupts else None, recent_run_ids=[run],
        open_interrupts=[OpenInterrupt(run_id=run, interrupt=i) for i in interrupts],
        run_started_at=started, updated_at=datetime.now(UTC))


async def changes(http: httpx.AsyncClient, headers: dict[str, str], out: list[dict[str, Any]],
                  ready: asyncio.Event) -> None:
    async with http.stream("GET", "/interrupts/stream", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line == ": ready":
                ready.set()
            if line.startswith("data: "):
                out.append(orjson.loads(line[6:]))


def new_tenant() -> tuple[str, str, dict[str, str]]:
    """A new tenant's API key, its name, and the headers that present the key."""
    token, tenant = f"key-c-{uuid.uuid4().hex}", f"c-{uuid.uuid4().hex[:8]}"
    return token, tenant, {"Authorization": f"Bearer {token}"}


async def opened_in_turn(backstage: Backstage, tenant: str, prefix: str, n: int) -> list[str]:
    """``n`` new threads of ``tenant``, each with one interrupt, opened one after the
    other (newest last)."""
    threads = [f"{prefix}{k}-{uuid.uuid4().hex[:8]}" for k in range(n)]
    for thread in threads:
        await backstage.write_state(interrupted(thread, tenant, Interrupt(
            id=f"i-{thread}", reason="tool_approval")), thread)
        await asyncio.sleep(0.01)
    return threads


async def until(predicate: Any) -> None:
    async with asyncio.timeout(20):
        while not predicate():
            await asyncio.sleep(0.05)


async def test_listing_and_stream_are_tenant_scoped_and_live(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    mine, theirs = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    soon = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    await backstage.write_state(interrupted(theirs, "tenant-b", Interrupt(
        id="ib", reason="tool_approval")), theirs)
    async with serving(kafka, api_keys=KEYS) as app:
        await until(lambda: app.relay.threads.get(theirs) is not None)
        seen_a: list[dict[str, Any]] = []
        seen_b: list[dict[str, Any]] = []
        ready_a, ready_b = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(changes(app.http, A, seen_a, ready_a)),
                 asyncio.create_task(changes(app.http, B, seen_b, ready_b))]
        await asyncio.wait_for(asyncio.gather(ready_a.wait(), ready_b.wait()), 20)
        schema = {"type": "object", "properties": {"approved": {"type": "boolean"}}}
        await backstage.write_state(interrupted(mine, "tenant-a", Interrupt(
            id="ia", reason="tool_approval", message="Delete?", tool_call_id="c1",
            response_schema=schema, expires_at=soon)), mine)
        await until(lambda: any(c["type"] == "expired" for c in seen_a))
        listed = (await app.http.get("/interrupts", headers=A)).json()
        expired_only = (await app.http.get("/interrupts?expired=true", headers=A)).json()
        other_reason = (await app.http.get("/interrupts?reason=sign_off", headers=A)).json()
        listed_b = (await app.http.get("/interrupts", headers=B)).json()
        await backstage.write_state(interrupted(mine, "tenant-a"), mine)
        await until(lambda: any(c["type"] == "answered" for c in seen_a))
        after = (await app.http.get("/interrupts", headers=A)).json()
        anonymous = await app.http.get("/interrupts")
        bad = await app.http.get("/interrupts?limit=0", headers=A)
        for task in tasks:
            task.cancel()
    assert [c["type"] for c in seen_a] == ["opened", "expired", "answered"]
    assert {c["interrupt"]["id"] for c in seen_a} == {"ia"}
    assert seen_b == []  # tenant b's own thread did not change; a's never reaches b
    (item,) = listed["interrupts"]
    assert {k: item[k] for k in ("id", "threadId", "runId", "agent", "reason", "message",
                                 "toolCallId", "responseSchema", "expiresAt", "expired")} == {
        "id": "ia", "threadId": mine, "runId": "run-1", "agent": AGENT,
        "reason": "tool_approval", "message": "Delete?", "toolCallId": "c1",
        "responseSchema": schema, "expiresAt": soon, "expired": True}
    assert listed["total"] == 1
    assert "nextOffset" not in listed
    assert [i["id"] for i in expired_only["interrupts"]] == ["ia"]
    assert other_reason["interrupts"] == []
    assert [i["id"] for i in listed_b["interrupts"]] == ["ib"]
    assert after["interrupts"] == []
    assert anonymous.status_code == 401
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_input")


async def test_a_walk_by_cursor_skips_nothing_while_listed_interrupts_are_answered(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """The page after ``next`` starts after the last item read, wherever it went: two
    listed interrupts answered before the next page moved ``offset`` past two others."""
    token, tenant, c = new_tenant()
    threads = await opened_in_turn(backstage, tenant, "p", 5)
    async with serving(kafka, api_keys=f"{token}={tenant}") as app:
        await until(lambda: all(app.relay.threads.get(t) is not None for t in threads))
        first = (await app.http.get("/interrupts?limit=2", headers=c)).json()
        for item in first["interrupts"]:
            await backstage.write_state(interrupted(item["threadId"], tenant), item["threadId"])
        await until(lambda: all(app.relay.threads.get(t).status == "idle"  # type: ignore[union-attr]
                                for t in threads[3:]))
        pages = [first]
        while "next" in pages[-1]:
            pages.append((await app.http.get(f"/interrupts?limit=2&cursor={pages[-1]['next']}",
                                             headers=c)).json())
        bad = await app.http.get("/interrupts?cursor=W10", headers=c)
    assert [i["threadId"] for i in first["interrupts"]] == threads[:2:-1]
    assert first["nextOffset"] == 2
    assert [i["threadId"] for p in pages[1:] for i in p["interrupts"]] == threads[2::-1]
    assert all("nextOffset" not in p for p in pages[1:])
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_input")


async def test_a_threads_history_has_tool_call_arguments_and_is_the_owners_only(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread = f"h-{uuid.uuid4().hex[:8]}"
    await backstage.emit(thread, "run-1", [
        {**started(thread, "run-1"), "input": {
            "threadId": thread, "runId": "run-1", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": "go"}]}},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "delete_files"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"paths": ["/tmp/a"]}'},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        finished(thread, "run-1", outcome={"type": "interrupt", "interrupts": [
            {"id": "ia", "reason": "tool_approval", "toolCallId": "c1"}]})])
    await backstage.write_state(interrupted(thread, "tenant-a", Interrupt(
        id="ia", reason="tool_approval", tool_call_id="c1")), thread)
    async with serving(kafka, api_keys=KEYS) as app:
        await until(lambda: app.relay.threads.get(thread) is not None)
        history = await app.http.get(f"/interrupts/threads/{thread}", headers=A)
        foreign = await app.http.get(f"/interrupts/threads/{thread}", headers=B)
    assert history.status_code == 200, history.text
    body = history.json()
    assert body["toolCalls"]["c1"] == {"id": "c1", "name": "delete_files",
                                       "arguments": {"paths": ["/tmp/a"]}}
    assert [m["role"] for m in body["input"]["messages"]] == ["user", "assistant"]
    assert [r.get("type") for r in body["trail"]] == ["RUN_STARTED", "RUN_FINISHED"]
    assert body["thread"]["openInterrupts"][0]["interrupt"]["id"] == "ia"
    assert (foreign.status_code, foreign.json()["code"]) == (404, "unknown_thread")


async def test_the_listing_carries_each_gated_tool_call_read_once_from_the_events(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    early, late = f"te-{uuid.uuid4().hex[:8]}", f"tl-{uuid.uuid4().hex[:8]}"
    started_at = datetime.now(UTC)
    # read at startup: streamed in two deltas, the second one resent (same run and seq)
    await backstage.emit(early, "run-1", [
        started(early, "run-1"),
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "delete_files"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"paths": '},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '["/tmp/a"]}'},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '["/tmp/a"]}'},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        finished(early, "run-1")], seqs=[0, 1, 2, 3, 3, 4, 5])
    await backstage.write_state(interrupted(early, "tenant-a", Interrupt(
        id="ia", reason="tool_approval", tool_call_id="c1"), started=started_at), early)
    async with serving(kafka, api_keys=KEYS) as app:
        await until(lambda: app.relay.threads.get(early) is not None)
        seen: list[dict[str, Any]] = []
        ready = asyncio.Event()
        task = asyncio.create_task(changes(app.http, A, seen, ready))
        await asyncio.wait_for(ready.wait(), 20)
        # read live: a call of an earlier run, echoed by the interrupted run's input
        echoed = {"id": "m2", "role": "assistant", "toolCalls": [{
            "id": "c2", "type": "function",
            "function": {"name": "send_mail", "arguments": '{"to": "ops@example.com"}'}}]}
        await backstage.emit(late, "run-2", [
            {**started(late, "run-2"), "input": {
                "threadId": late, "runId": "run-2", "state": {}, "tools": [], "context": [],
                "forwardedProps": {}, "messages": [echoed]}},
            finished(late, "run-2")])
        await backstage.write_state(interrupted(late, "tenant-a", Interrupt(
            id="ib", reason="tool_approval", tool_call_id="c2"), Interrupt(
            id="ic", reason="input"), run="run-2", started=datetime.now(UTC)), late)
        await until(lambda: any(c["type"] == "updated" for c in seen))
        async with asyncio.timeout(20):
            while True:  # the startup read may end after the live one
                listed = (await app.http.get("/interrupts", headers=A)).json()
                if sum("toolCall" in i for i in listed["interrupts"]) == 2:
                    break
                await asyncio.sleep(0.05)
        listed_b = (await app.http.get("/interrupts", headers=B)).json()
        task.cancel()
    calls = {i["id"]: i.get("toolCall") for i in listed["interrupts"]}
    assert calls == {
        "ia": {"id": "c1", "name": "delete_files", "arguments": {"paths": ["/tmp/a"]}},
        "ib": {"id": "c2", "name": "send_mail", "arguments": {"to": "ops@example.com"}},
        "ic": None}
    kinds = [(c["type"], c["interrupt"]["id"]) for c in seen]
    # ("updated", "ia") comes whenever the startup read ends: before the live ones or after
    live = [k for k in kinds if k != ("updated", "ia")]
    assert live[:2] == [("opened", "ib"), ("opened", "ic")]
    assert ("updated", "ib") in kinds
    assert set(kinds) <= {("opened", "ib"), ("opened", "ic"), ("updated", "ib"), ("updated", "ia")}
    assert all("toolCall" in c["interrupt"] for c in seen if c["type"] == "updated")
    assert listed_b["interrupts"] == []


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "state-dir"])
async def test_an_interrupt_held_slim_is_listed_and_announced_whole(
        kafka: KafkaSettings, backstage: Backstage, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Any, on_disk: bool) -> None:
    """Past ``AGUI_INBOX_INTERRUPT_BYTES`` the index holds only what it filters on; the
    rest of a listed or announced item comes from the thread view (its store on disk)."""
    monkeypatch.setenv("AGUI_INBOX_INTERRUPT_BYTES", "256")
    mine = f"a-{uuid.uuid4().hex[:8]}"
    schema = {"type": "object", "properties": {
        f"f{k}": {"type": "string", "description": "d" * 100} for k in range(10)}}
    overrides: dict[str, Any] = {"state_dir": tmp_path} if on_disk else {}
    async with serving(kafka, api_keys=KEYS, **overrides) as app:
        seen: list[dict[str, Any]] = []
        ready = asyncio.Event()
        task = asyncio.create_task(changes(app.http, A, seen, ready))
        await asyncio.wait_for(ready.wait(), 20)
        await backstage.write_state(interrupted(mine, "tenant-a", Interrupt(
            id="big", reason="input", message="m" * 500, response_schema=schema)), mine)
        await until(lambda: bool(seen))
        listed = (await app.http.get("/interrupts", headers=A)).json()
        (feed,) = [getattr(hook, "__self__", None) for hook in app.relay.threads.listeners]
        (entry,) = feed.index.entries()
        task.cancel()
    assert not entry.whole
    for item in (listed["interrupts"][0], seen[0]["interrupt"]):
        assert (item["message"], item["responseSchema"]) == ("m" * 500, schema)
