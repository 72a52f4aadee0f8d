"""GET /threads, replay with Last-Event-ID, and cancel, on the real broker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt
from consumer_harness import (
    AGENT,
    Backstage,
    data_values,
    finished,
    run_input,
    serving,
    sse_frames,
    started,
    text,
)

from contracts import OpenInterrupt, ThreadState
from services.consumer.relay import Relay
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def until_thread(relay: Relay, thread_id: str, present: bool = True) -> None:
    async with asyncio.timeout(20):
        while (relay.threads.get(thread_id) is not None) != present:
            await asyncio.sleep(0.05)


async def asked_while_undecided(app: Any, backstage: Backstage, method: str, path: str
                                ) -> tuple[str, str, asyncio.Task[Any], asyncio.Task[Any]]:
    """Post a run, ask ``method path`` (``{thread}`` and ``{run}`` filled in) before the
    gatekeeper (the backstage) decides it, check the answer waits, then admit the run."""
    body = run_input()
    thread, run = body["threadId"], body["runId"]
    post = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=body))
    request = await backstage.next_request()
    asked = asyncio.create_task(app.http.request(method, path.format(thread=thread, run=run)))
    await asyncio.sleep(0.3)  # the question is in, the decision is not yet written
    assert not asked.done()
    await backstage.decide(request)
    return thread, run, post, asked


def interrupted_state(thread: str, run: str) -> ThreadState:
    return ThreadState(
        thread_id=thread, status="interrupted", agent=AGENT, run_id=run,
        interrupted_run_id=run, recent_run_ids=[run],
        open_interrupts=[
            OpenInterrupt(run_id=run, interrupt=Interrupt(
                id="i1", reason="tool_approval", expires_at="2030-01-01T00:00:00Z")),
            OpenInterrupt(run_id=run, interrupt=Interrupt(id="i2", reason="choice")),
        ],
        updated_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))


async def test_thread_state_shows_status_open_interrupts_and_last_run(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        await backstage.write_state(interrupted_state("th-1", "run-1"), "th-1")
        await until_thread(app.relay, "th-1")
        response = await app.http.get("/threads/th-1")
        missing = await app.http.get("/threads/th-nope")
        await backstage.write_state(None, "th-1")  # a tombstone forgets the thread
        await until_thread(app.relay, "th-1", present=False)
        forgotten = await app.http.get("/threads/th-1")
    assert response.status_code == 200
    assert response.json() == {
        "threadId": "th-1", "status": "interrupted", "agent": AGENT, "lastRunId": "run-1",
        "interruptedRunId": "run-1", "queuedRequests": 0,
        "updatedAt": "2026-01-02T03:04:05Z",
        "openInterrupts": [
            {"runId": "run-1", "expiresAt": "2030-01-01T00:00:00Z",
             "interrupt": {"id": "i1", "reason": "tool_approval",
                           "expiresAt": "2030-01-01T00:00:00Z"}},
            {"runId": "run-1", "interrupt": {"id": "i2", "reason": "choice"}},
        ],
    }
    assert (missing.status_code, missing.json()["code"]) == (404, "unknown_thread")
    assert forgotten.status_code == 404


async def test_a_fresh_instance_restores_the_view_from_the_compacted_topic(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    await backstage.write_state(interrupted_state("th-old", "run-9"), "th-old")
    async with serving(kafka) as app:
        ready = await app.http.get("/readyz")
        response = await app.http.get("/threads/th-old")
    assert ready.status_code == 200
    assert response.json()["openInterrupts"][0]["interrupt"]["id"] == "i1"


async def test_replay_streams_the_run_with_ids_and_continues_after_last_event_id(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = "th-r", "run-r"
    events = [started(thread, run), *text("m1", "hello"), finished(thread, run),
              {"type": "RUN_ERROR", "message": "failed while flushing"}]
    # another run of the same thread, before and after, must not leak in
    await backstage.emit(thread, "other", [started(thread, "other"), finished(thread, "other")])
    written = await backstage.emit(thread, run, events)
    await backstage.emit(thread, run, events[:2])  # redelivered duplicates
    await backstage.write_state(ThreadState(thread_id=thread, status="idle", run_id=run,
                                            recent_run_ids=["other", run]), thread)
    async with serving(kafka) as app:
        await until_thread(app.relay, thread)
        full = await app.http.get(f"/threads/{thread}/runs/{run}/events")
        rest = await app.http.get(f"/threads/{thread}/runs/{run}/events",
                                  headers={"Last-Event-ID": "3"})
        bad = await app.http.get(f"/threads/{thread}/runs/{run}/events",
                                 headers={"Last-Event-ID": "three"})
        unknown_run = await app.http.get(f"/threads/{thread}/runs/nope/events")
        unknown_thread = await app.http.get("/threads/th-none/runs/x/events")
    assert full.status_code == 200
    frames = sse_frames(full.content)
    # the late RUN_ERROR is on the topic, so the replay shows it
    assert [f["id"] for f in frames] == ["0", "1", "2", "3", "4", "5"]
    assert data_values(full.content) == written
    assert [f["id"] for f in sse_frames(rest.content)] == ["4", "5"]
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_header")
    assert (unknown_run.status_code, unknown_run.json()["code"]) == (404, "unknown_run")
    assert (unknown_thread.status_code, unknown_thread.json()["code"]) == (404, "unknown_thread")


async def test_replay_of_a_live_run_continues_live_until_the_terminal_event(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        body = run_input()
        thread, run = body["threadId"], body["runId"]
        post = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=body))
        await backstage.decide(await backstage.next_request())
        first = await backstage.emit(thread, run, [started(thread, run), *text("m", "a")[:2]])
        # the run's start is indexed: this replay seeks to it rather than scanning
        async with asyncio.timeout(20):
            while (thread, run) not in app.relay.fanout.run_starts:
                await asyncio.sleep(0.05)
        replay = asyncio.create_task(app.http.get(f"/threads/{thread}/runs/{run}/events",
                                                  headers={"Last-Event-ID": "0"}))
        async with asyncio.timeout(20):
            while app.relay.fanout.stream_count < 2:
                await asyncio.sleep(0.05)
        rest = await backstage.emit(thread, run, [*text("m", "a")[2:], finished(thread, run)],
                                    seqs=[3, 4])
        replayed, posted = await replay, await post
    assert data_values(posted.content) == first + rest
    assert [f["id"] for f in sse_frames(replayed.content)] == ["1", "2", "3", "4"]
    assert data_values(replayed.content) == (first + rest)[1:]


async def test_replay_of_an_admitted_run_that_has_not_started_waits_for_it(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = "th-w", "run-w"
    await backstage.write_state(ThreadState(thread_id=thread, status="running", run_id=run),
                                thread)
    async with serving(kafka) as app:
        await until_thread(app.relay, thread)
        replay = asyncio.create_task(app.http.get(f"/threads/{thread}/runs/{run}/events"))
        async with asyncio.timeout(20):
            while app.relay.fanout.stream_count < 1:
                await asyncio.sleep(0.05)
        written = await backstage.emit(thread, run, [started(thread, run), finished(thread, run)])
        response = await replay
    assert data_values(response.content) == written


async def test_cancel_publishes_a_control_command_for_known_runs_only(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    await backstage.write_state(ThreadState(thread_id="th-c", status="running", run_id="run-c",
                                            recent_run_ids=["run-b", "run-c"]), "th-c")
    async with serving(kafka) as app:
        await until_thread(app.relay, "th-c")
        accepted = await app.http.post("/threads/th-c/runs/run-c/cancel")
        unknown_run = await app.http.post("/threads/th-c/runs/run-x/cancel")
        unknown_thread = await app.http.post("/threads/th-none/runs/run-c/cancel")
        (command,) = await backstage.control_commands(1)
    assert accepted.status_code == 202
    doc = accepted.json()
    assert (doc["threadId"], doc["runId"], doc["requestedBy"]) == ("th-c", "run-c", "anonymous")
    assert (command.thread_id, command.run_id, command.kind) == ("th-c", "run-c", "cancel")
    assert (unknown_run.status_code, unknown_run.json()["code"]) == (404, "unknown_run")
    assert (unknown_thread.status_code, unknown_thread.json()["code"]) == (404, "unknown_thread")


async def test_cancel_sent_while_the_run_awaits_its_decision_waits_for_the_admission(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        thread, run, post, cancel = await asked_while_undecided(
            app, backstage, "POST", "/threads/{thread}/runs/{run}/cancel")
        accepted = await cancel
        (command,) = await backstage.control_commands(1)
        await backstage.emit(thread, run, [started(thread, run),
                                           finished(thread, run, outcome={"type": "cancelled"})])
        await post
        unknown = await app.http.post(f"/threads/{thread}/runs/run-never-posted/cancel")
    assert accepted.status_code == 202
    assert (command.thread_id, command.run_id, command.kind) == (thread, run, "cancel")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_thread")


async def test_a_replay_asked_while_the_run_awaits_its_decision_streams_the_run(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        thread, run, post, replay = await asked_while_undecided(
            app, backstage, "GET", "/threads/{thread}/runs/{run}/events")
        await backstage.emit(thread, run, [started(thread, run), finished(thread, run)])
        replayed, posted = await replay, await post
    assert replayed.status_code == 200
    assert [orjson.loads(d)["type"] for d in data_values(replayed.content)] == [
        orjson.loads(d)["type"] for d in data_values(posted.content)] == [
        "RUN_STARTED", "RUN_FINISHED"]


async def test_cancel_of_a_just_admitted_run_is_accepted_before_the_view_catches_up(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        body = run_input()
        thread, run = body["threadId"], body["runId"]
        post = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=body))
        await backstage.decide(await backstage.next_request())
        await backstage.emit(thread, run, [started(thread, run)])
        cancel = await app.http.post(f"/threads/{thread}/runs/{run}/cancel")
        (command,) = await backstage.control_commands(1)
        await backstage.emit(thread, run, [finished(thread, run, outcome={"type": "cancelled"})],
                             seqs=[1])
        posted = await post
    assert cancel.status_code == 202
    assert command.run_id == run
    last = orjson.loads(data_values(posted.content)[-1])
    assert last["outcome"] == {"type": "cancelled"}
