"""POST /agents/{agent} on the real broker: every verdict, every error, the stream's shape.

The test plays gatekeeper and producer (``Backstage``): it reads the
RunRequest the service published and writes the Decision and the events.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

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

from contracts import ThreadState
from services.consumer import agents as agents_module
from services.consumer.agents import LOOKUPS_PER_S
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def post(http: httpx.AsyncClient, body: dict[str, object] | bytes,
               agent: str = AGENT) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return await http.post(f"/agents/{agent}", content=content,
                           headers={"Content-Type": "application/json",
                                    "Accept": "text/event-stream"})


async def test_an_admitted_run_streams_the_producers_bytes_in_order(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        body = run_input()
        thread, run = body["threadId"], body["runId"]
        response_task = asyncio.create_task(post(app.http, body))
        request = await backstage.next_request()
        assert request.agent == AGENT
        assert request.input.run_id == run
        assert request.principal == "anonymous"
        events = [started(thread, run), *text("m1", "héllo\nworld"), finished(thread, run)]
        # Events written *before* the decision arrive early and are buffered;
        # seq 2 comes before 1 and seq 1 is repeated: order restored, duplicate dropped.
        written = await backstage.emit(thread, run, events[:1])
        written += await backstage.emit(thread, run, [events[2], events[1], events[1]],
                                        seqs=[2, 1, 1])
        await backstage.decide(request)
        written += await backstage.emit(thread, run, events[3:], seqs=[3, 4])
        response = await response_task
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = sse_frames(response.content)
    assert [f["id"] for f in frames] == ["0", "1", "2", "3", "4"]
    by_seq = {0: written[0], 2: written[1], 1: written[2], 3: written[4], 4: written[5]}
    assert data_values(response.content) == [by_seq[i] for i in range(5)]


async def test_the_body_closes_after_the_terminal_event_without_waiting_for_more(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        body = run_input()
        thread, run = body["threadId"], body["runId"]
        task = asyncio.create_task(post(app.http, body))
        await backstage.decide(await backstage.next_request())
        await backstage.emit(thread, run, [started(thread, run),
                                           {"type": "RUN_ERROR", "message": "boom",
                                            "code": "scripted_failure"}])
        response = await task
        # a late record of the run (a RUN_ERROR after the terminal) is not in the body
        await backstage.emit(thread, run, [{"type": "RUN_ERROR", "message": "late"}], seqs=[2])
    types = [orjson.loads(v)["type"] for v in data_values(response.content)]
    assert types == ["RUN_STARTED", "RUN_ERROR"]


@pytest.mark.parametrize(
    ("code", "status", "ids"),
    [("thread_busy", 409, None), ("uncovered_interrupts", 422, ["i1", "i2"]),
     ("interrupt_expired", 422, ["i3"]), ("unknown_interrupt", 422, ["zz"]),
     ("duplicate_entry", 422, ["i1"]), ("duplicate_run_id", 409, None)],
)
async def test_a_rejection_is_a_problem_with_no_stream_byte(
        kafka: KafkaSettings, backstage: Backstage, code: str, status: int,
        ids: list[str] | None) -> None:
    body = run_input()
    # a thread that has run (on a thread never seen, unknown_interrupt reads as unknown_thread)
    await backstage.write_state(ThreadState(thread_id=body["threadId"], run_id="before"),
                                body["threadId"])
    async with serving(kafka) as app:
        async with asyncio.timeout(20):
            while app.relay.threads.get(body["threadId"]) is None:
                await asyncio.sleep(0.05)
        task = asyncio.create_task(post(app.http, body))
        await backstage.decide(await backstage.next_request(), "rejected", code=code,
                               interrupt_ids=ids, message=f"refused: {code}")
        response = await task
        assert app.relay.fanout.stream_count == 0
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == code
    assert problem["status"] == status
    assert problem["detail"] == f"refused: {code}"
    assert problem["type"].endswith(code)
    assert problem["title"]
    assert problem.get("interruptIds") == ids


async def test_a_queued_request_waits_for_its_final_decision(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, decision_timeout_s=5.0) as app:
        body = run_input()
        thread, run = body["threadId"], body["runId"]
        task = asyncio.create_task(post(app.http, body))
        request = await backstage.next_request()
        await backstage.decide(request, "queued", message="behind the running run")
        await backstage.decide(request, "admitted")
        await backstage.emit(thread, run, [started(thread, run), finished(thread, run)])
        response = await task
    assert response.status_code == 200
    assert len(data_values(response.content)) == 2


async def test_no_decision_in_time_is_a_504(kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, decision_timeout_s=0.5) as app:
        response = await post(app.http, run_input())
        await backstage.next_request()  # it was published all the same
        assert app.relay.fanout.stream_count == 0
    assert response.status_code == 504
    assert response.json()["code"] == "decision_timeout"


async def test_invalid_bodies_are_400_and_never_published(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, max_body_bytes=2048) as app:
        bad_json = await post(app.http, b'{"threadId": ')
        not_object = await post(app.http, b"[1, 2]")
        no_run_id = await post(app.http, {"threadId": "t", "messages": []})
        bad_status = await post(app.http, run_input(
            resume=[{"interruptId": "i1", "status": "abandoned"}]))
        too_large = await post(app.http, run_input(forwardedProps={"pad": "x" * 4096}))
        valid = asyncio.create_task(post(app.http, run_input()))
        first = await backstage.next_request()  # only the valid one reached the topic
        await backstage.decide(first, "rejected", code="thread_busy")
        await valid
    assert (bad_json.status_code, bad_json.json()["code"]) == (400, "invalid_json")
    assert (not_object.status_code, not_object.json()["code"]) == (400, "invalid_input")
    assert no_run_id.status_code == 400
    assert "runId" in no_run_id.json()["detail"]
    assert bad_status.status_code == 400
    assert "status" in bad_status.json()["detail"]
    assert (too_large.status_code, too_large.json()["code"]) == (413, "payload_too_large")
    for response in (bad_json, no_run_id, too_large):
        assert response.headers["content-type"] == "application/problem+json"


async def test_unknown_agents_are_404_and_new_dispatch_topics_are_found(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, agents="configured=some.module:agent") as app:
        unknown = await post(app.http, run_input(), agent="approval")
        assert unknown.status_code == 404
        assert unknown.json()["code"] == "unknown_agent"
        # an agent deployed after startup: its dispatch topic makes it known
        from services.kafka.admin import ensure_topics
        await ensure_topics(kafka, ("approval",))
        await asyncio.sleep(1.1)  # a name found missing is asked about again after a second
        task = asyncio.create_task(post(app.http, run_input(), agent="approval"))
        request = await backstage.next_request()
        assert request.agent == "approval"
        await backstage.decide(request, "rejected", code="thread_busy")
        assert (await task).status_code == 409
        # an agent named in AGUI_AGENTS is known without a topic
        task = asyncio.create_task(post(app.http, run_input(), agent="configured"))
        await backstage.decide(await backstage.next_request(), "rejected", code="thread_busy")
        assert (await task).status_code == 409


async def test_an_agent_whose_dispatch_topic_is_deleted_is_404_after_the_refresh(
        kafka: KafkaSettings, backstage: Backstage,
        delete_topics: Callable[..., Awaitable[None]]) -> None:
    from services.kafka.admin import ensure_topics
    await ensure_topics(kafka, ("doomed",))
    async with serving(kafka, agents="", agent_refresh_s=0.3) as app:
        assert "doomed" in app.relay.agents.names  # listed at start
        await delete_topics(kafka.topics.dispatch("doomed"))
        for _ in range(100):  # asked about by name at each refresh
            if "doomed" not in app.relay.agents.names:
                break
            await asyncio.sleep(0.1)
        gone = await post(app.http, run_input(), agent="doomed")
        assert gone.status_code == 404
        assert gone.json()["code"] == "unknown_agent"
        assert "scripted" in app.relay.agents.names  # the others stay


async def test_keepalive_comments_flow_while_the_run_is_silent(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, keepalive_s=0.1) as app:
        body = run_input()
        thread, run = body["threadId"], body["runId"]

        async def admit() -> None:
            await backstage.decide(await backstage.next_request())

        admitting = asyncio.create_task(admit())
        chunks: list[bytes] = []
        async with app.http.stream("POST", f"/agents/{AGENT}", json=body) as response:
            await admitting
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                if b"keep-alive" in chunk and len(chunks) == 1:
                    # silence so far: only keepalives; now the run speaks
                    await backstage.emit(thread, run, [started(thread, run),
                                                       finished(thread, run)])
    frames = sse_frames(b"".join(chunks))
    assert frames[0] == {"comment": "keep-alive"}
    assert [orjson.loads(f["data"])["type"] for f in frames if "data" in f] == [
        "RUN_STARTED", "RUN_FINISHED"]


async def test_too_many_streams_is_a_503_before_anything_is_published(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, max_streams=1) as app:
        body = run_input()
        thread, run = body["threadId"], body["runId"]
        first = asyncio.create_task(post(app.http, body))
        request = await backstage.next_request()
        second = await post(app.http, run_input())
        assert second.status_code == 503
        assert second.json()["code"] == "too_many_streams"
        assert second.headers["retry-after"] == "5"  # when to come back, as every such 503
        await backstage.decide(request)
        await backstage.emit(thread, run, [started(thread, run), finished(thread, run)])
        assert (await first).status_code == 200


async def test_thread_state_changes_do_not_disturb_streams(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """Two runs on two threads at once, each stream gets only its own run's events."""
    async with serving(kafka) as app:
        a, b = run_input(), run_input()
        task_a = asyncio.create_task(post(app.http, a))
        task_b = asyncio.create_task(post(app.http, b))
        for _ in range(2):
            request = await backstage.next_request()
            t, r = request.input.thread_id, request.input.run_id
            await backstage.write_state(ThreadState(thread_id=t, status="running", run_id=r), t)
            await backstage.decide(request)
            await backstage.emit(t, r, [started(t, r), *text(f"m-{r}", r), finished(t, r)])
        responses = await asyncio.gather(task_a, task_b)
    for body, response in zip((a, b), responses, strict=True):
        events = [orjson.loads(v) for v in data_values(response.content)]
        assert len(events) == 5
        assert {e.get("runId") for e in events} - {None} == {body["runId"]}


async def test_an_agent_not_looked_up_for_a_flood_is_a_503_to_retry_not_a_404(
        kafka: KafkaSettings, backstage: Backstage, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made-up agent names spend the instance's lookups for the second: an agent
    deployed after the instance started, asked for then, was answered ``404
    unknown_agent`` (it exists); now ``503 agent_lookup_deferred`` with Retry-After."""
    now = [1_000.0]  # the directory's clock, held within one second
    monkeypatch.setattr(agents_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    async with serving(kafka) as app:
        late = f"late{uuid.uuid4().hex[:8]}"
        await ensure_topics(kafka, (late,))  # deployed after the instance started
        for i in range(LOOKUPS_PER_S):  # each looked up, each missing: 404
            made_up = await post(app.http, run_input(), agent=f"made-up-{i}")
            assert made_up.status_code == 404, made_up.text
        answer = await post(app.http, run_input(), agent=late)
        assert answer.status_code == 503, answer.text
        assert answer.json()["code"] == "agent_lookup_deferred"
        assert answer.headers["retry-after"] == "1"
        now[0] += 1.0
        assert await app.relay.agents.knows(late)  # the next second: looked up, found
