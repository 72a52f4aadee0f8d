"""What the service refuses at its edge, on the real broker: each refusal before publishing.

The test plays gatekeeper and producer (``Backstage``). Each test ends by
posting one good request and reading the requests topic: the first record
there is that request, so none of the refused ones was published. Every
case failed on the service before issue 13: a body nested 300 levels was a
500, ids of any length were published, a record over the broker's limit by
its key and headers was published, a ``text/plain`` POST started a run, two
``Authorization`` headers were taken (the first won), a thread id holding
``/`` could not be reached, and a replay from a finished run's end never
ended.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
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

from contracts import RunRequest, ThreadState, encode
from contracts.headers import TRACEPARENT
from services.consumer.relay import Relay
from services.kafka.sizing import record_size
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}


async def until_thread(relay: Relay, thread_id: str) -> None:
    async with asyncio.timeout(20):
        while relay.threads.get(thread_id) is None:
            await asyncio.sleep(0.05)


async def only_this_was_published(http: httpx.AsyncClient, backstage: Backstage) -> None:
    """Publish one good request: it must be the first on the requests topic."""
    good = run_input()
    task = asyncio.create_task(http.post(f"/agents/{AGENT}", json=good))
    request = await backstage.next_request()
    assert request.input.thread_id == good["threadId"]
    await backstage.decide(request, "rejected", code="thread_busy")
    assert (await task).status_code == 409


def deep_body(levels: int, thread_id: str | None = None) -> bytes:
    """A RunAgentInput whose forwardedProps make the document ``levels`` deep."""
    start = orjson.dumps(run_input(thread_id))[:-1]
    return start + b',"forwardedProps":' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"


async def test_ids_over_the_limit_and_deep_json_are_400s_naming_field_and_limit(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    long = "x" * 257
    async with serving(kafka) as app:
        http = app.http
        answers = {
            "threadId": await http.post(f"/agents/{AGENT}", json=run_input(thread_id=long)),
            "messages/0/id": await http.post(f"/agents/{AGENT}", json=run_input(
                messages=[{"id": long, "role": "user", "content": "hi"}])),
            "agent": await http.post(f"/agents/{long}", json=run_input()),
            "GET thread": await http.get(f"/threads/{long}"),
            "replay": await http.get(f"/threads/t/runs/{long}/events"),
            "cancel": await http.post(f"/threads/{long}/runs/r/cancel"),
        }
        deep = {levels: await http.post(f"/agents/{AGENT}", content=deep_body(levels),
                                        headers=JSON) for levels in (65, 253, 300, 1024, 2000)}
        at_limit = asyncio.create_task(http.post(
            f"/agents/{AGENT}", content=deep_body(64, "th-deep-64"), headers=JSON))
        request = await backstage.next_request()  # the first published: none of the above
        await backstage.decide(request, "rejected", code="thread_busy")
        assert (await at_limit).status_code == 409
    assert request.input.thread_id == "th-deep-64"
    fields = {"GET thread": "threadId", "replay": "runId", "cancel": "threadId"}
    for case, response in answers.items():
        assert response.status_code == 400, (case, response.text)
        problem = response.json()
        assert problem["code"] == "id_too_long"
        assert (problem["field"], problem["limit"]) == (fields.get(case, case), 256)
    for levels, response in deep.items():
        assert response.status_code == 400, (levels, response.text)
        assert response.json()["code"] == "json_too_deep"
        assert response.json()["limit"] == 64


async def test_a_request_whose_record_would_not_fit_is_413_with_key_and_headers_counted(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    limit = 65_536
    small = kafka.model_copy(update={"max_record_bytes": limit})
    thread = "k" * 256

    def body(pad: int, thread_id: str) -> dict[str, Any]:
        return run_input(thread_id=thread_id, forwardedProps={"pad": "p" * pad})

    def value_size(pad: int, thread_id: str) -> int:
        request = RunRequest.model_validate({
            "requestId": str(uuid.uuid4()), "agent": AGENT, "principal": "anonymous",
            "submittedAt": datetime.now(UTC), "input": body(pad, thread_id)})
        return len(encode(request))

    pad = limit - 150 - value_size(0, thread)
    traceparent = [(TRACEPARENT, b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-01")]
    assert value_size(pad, thread) < limit  # the value alone fits: the old check let it by
    assert record_size(thread.encode(), b"v" * value_size(pad, thread), traceparent) > limit
    async with serving(small) as app:
        refused = await app.http.post(f"/agents/{AGENT}", json=body(pad, thread))
        fitting = body(pad - 600, "t-fits")
        task = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=fitting))
        request = await backstage.next_request()
        await backstage.decide(request, "rejected", code="thread_busy")
        await task
    assert refused.status_code == 413, refused.text
    assert refused.json()["code"] == "payload_too_large"
    assert "AGUI_MAX_RECORD_BYTES" in refused.json()["detail"]
    assert request.input.thread_id == "t-fits"


async def test_a_body_that_is_not_json_is_415_before_it_is_read(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    body = orjson.dumps(run_input())
    async with serving(kafka) as app:
        http = app.http
        plain = await http.post(f"/agents/{AGENT}", content=body,
                                headers={"Content-Type": "text/plain"})
        form = await http.post(f"/agents/{AGENT}", content=body, headers={
            "Content-Type": "application/x-www-form-urlencoded"})
        bare = await http.post(f"/agents/{AGENT}", content=body)
        cancel = await http.post("/threads/t/runs/r/cancel", content=b"x=1",
                                 headers={"Content-Type": "text/plain"})
        vendor = run_input()
        task = asyncio.create_task(http.post(f"/agents/{AGENT}", content=orjson.dumps(vendor),
                                             headers={"Content-Type":
                                                      "application/vnd.agui+json; charset=utf-8"}))
        request = await backstage.next_request()
        await backstage.decide(request, "rejected", code="thread_busy")
        assert (await task).status_code == 409
    assert request.input.thread_id == vendor["threadId"]  # the first published
    for response in (plain, form, bare, cancel):
        assert response.status_code == 415, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "unsupported_media_type"


async def test_two_authorization_headers_are_refused_with_authentication_off(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    twice = [("Authorization", "Bearer one"), ("Authorization", "Bearer two")]
    async with serving(kafka) as app:
        posted = await app.http.post(f"/agents/{AGENT}", json=run_input(), headers=twice)
        health = await app.http.get("/healthz", headers=twice)
        once = await app.http.get("/healthz", headers=twice[:1])
        await only_this_was_published(app.http, backstage)
    for response in (posted, health):
        assert response.status_code == 400
        assert response.json()["code"] == "duplicate_header"
    assert once.status_code == 200


async def test_a_thread_id_holding_a_slash_is_reached_with_it_encoded(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = "p/child-1", "run-c"
    events = [started(thread, run), *text("m", "hi"), finished(thread, run)]
    written = await backstage.emit(thread, run, events)
    await backstage.write_state(ThreadState(thread_id=thread, status="running", run_id=run,
                                            recent_run_ids=[run]), thread)
    async with serving(kafka) as app:
        await until_thread(app.relay, thread)
        got = await app.http.get("/threads/p%2Fchild-1")
        replayed = await app.http.get(f"/threads/p%2Fchild-1/runs/{run}/events")
        cancelled = await app.http.post(f"/threads/p%2Fchild-1/runs/{run}/cancel")
        (command,) = await backstage.control_commands(1)
        plain = await app.http.get("/threads/p/child-1")  # the slash unencoded: no route
        paths = (await app.http.get("/openapi.json")).json()["paths"]
    assert got.status_code == 200, got.text
    assert got.json()["threadId"] == thread
    assert replayed.status_code == 200
    assert data_values(replayed.content) == written
    assert cancelled.status_code == 202
    assert cancelled.json()["threadId"] == thread
    assert (command.thread_id, command.run_id) == (thread, run)
    assert plain.status_code == 404
    assert {"/threads/{thread_id}", "/threads/{thread_id}/runs/{run_id}/events",
            "/threads/{thread_id}/runs/{run_id}/cancel"} <= set(paths)


async def test_a_replay_from_a_finished_runs_end_is_204_at_once(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = f"th-{uuid.uuid4().hex[:8]}", "run-e"
    await backstage.emit(thread, run, [started(thread, run), *text("m", "hi"),
                                       finished(thread, run)])
    await backstage.write_state(ThreadState(thread_id=thread, status="idle", run_id=run,
                                            recent_run_ids=[run]), thread)
    path = f"/threads/{thread}/runs/{run}/events"
    async with serving(kafka) as app:
        await until_thread(app.relay, thread)
        ends = [await app.http.get(path, headers={"Last-Event-ID": str(after)}, timeout=5.0)
                for after in (4, 5, 10**12)]
        rest = await app.http.get(path, headers={"Last-Event-ID": "2"}, timeout=5.0)
        streams = app.relay.fanout.stream_count
    for response in ends:
        assert (response.status_code, response.content) == (204, b"")
    assert rest.status_code == 200
    assert [f["id"] for f in sse_frames(rest.content)] == ["3", "4"]
    assert streams == 0
