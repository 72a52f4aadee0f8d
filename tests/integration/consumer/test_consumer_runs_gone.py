"""A run that is over and whose records retention took is answered, not waited for live.

The gatekeeper remembers a thread's last decisions for as long as the thread
lives, the ``events`` topic keeps records 7 days: a request sent again under
its request id once its run's records are gone is admitted again
(``Decision.replayed``), the consumer reads the run from its admission on and
finds nothing. It had then waited for the run live, with keep-alives, for
ever; the replay route did the same for a run this instance saw admitted.
Now a run over before the scan (the instance read its end, or the thread
view is past it) with nothing on the log is ``404 unknown_run`` on both.
The records are deleted as retention would (``delete_records`` up to the
partition's end); the backstage plays gatekeeper and producer.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka.admin import RecordsToDelete
from consumer_harness import (
    AGENT,
    WAIT_S,
    Backstage,
    Served,
    finished,
    run_input,
    serving,
    started,
)
from hostile.client import as_forwarded

from contracts import Decision, RunRequest, ThreadState, encode
from contracts.records import RememberedDecision
from services.consumer.problems import RetryLater
from services.consumer.relay import Relay
from services.kafka.clients import AIOKafkaAdminClient, TopicPartition, new_consumer
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

ANSWER_S = 8.0
"""Long enough for a scan of a few records; the defect kept the stream open for ever."""


async def delete_thread_records(kafka: KafkaSettings, thread_id: str, keep: int = 0) -> None:
    """Delete every record of the thread's events partition but the last ``keep``, as
    retention would."""
    tp = TopicPartition(kafka.topics.events, partition_for(thread_id, kafka.partitions))
    reader = new_consumer(kafka, "runs-gone-ends", group_id=None)
    await reader.start()
    try:
        end = (await reader.end_offsets([tp]))[tp]
    finally:
        await reader.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_records({tp: RecordsToDelete(end - keep)})
    finally:
        await admin.close()


async def replay_admission(backstage: Backstage, request: RunRequest,
                           admitted_at: datetime) -> None:
    """The gatekeeper's answer to a request id it decided already: the same admission."""
    decision = Decision(request_id=request.request_id, thread_id=request.input.thread_id,
                        run_id=request.input.run_id, agent=AGENT, verdict="admitted",
                        message="decided by the test", decided_at=admitted_at, replayed=True)
    await backstage.producer.send_and_wait(backstage.kafka.topics.decisions, encode(decision),
                                           key=request.input.thread_id.encode())


async def run_to_its_end(app: Served, backstage: Backstage, request_id: str
                         ) -> tuple[dict[str, Any], datetime]:
    """A run streamed to its end through ``app``, then its records deleted; its input and
    when it was admitted."""
    body = run_input(f"gone-{uuid.uuid4().hex[:8]}")
    thread_id, run_id = str(body["threadId"]), str(body["runId"])
    post = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=body,
                                             headers=as_forwarded(request_id)))
    request = await backstage.next_request()
    admitted_at = datetime.now(UTC)
    await backstage.decide(request)
    await backstage.emit(thread_id, run_id, [started(thread_id, run_id),
                                             finished(thread_id, run_id)])
    first = await post
    assert first.status_code == 200
    assert b"RUN_FINISHED" in first.content
    await delete_thread_records(backstage.kafka, thread_id)
    return body, admitted_at


async def test_a_request_sent_again_after_its_runs_records_are_gone_is_answered(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """The instance streamed the run to its end; sent again once the records are gone,
    the request is answered 404 at once."""
    async with serving(kafka, keepalive_s=1.0) as app:
        request_id = f"q-{uuid.uuid4().hex}"
        body, admitted_at = await run_to_its_end(app, backstage, request_id)
        again = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=body,
                                                  headers=as_forwarded(request_id)))
        await replay_admission(backstage, await backstage.next_request(), admitted_at)
        async with asyncio.timeout(ANSWER_S):  # the defect: keep-alives for ever
            response = await again
        assert response.status_code == 404, response.text
        assert response.json()["code"] == "unknown_run"
        assert app.relay.fanout.stream_count == 0


async def test_a_request_sent_again_whose_thread_cannot_be_read_leaves_no_stream_behind(
        kafka: KafkaSettings, backstage: Backstage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The opening of a run sent again reads its thread; a store failing just then is a
    503, and the stream subscribed before publishing is dropped with it: it was kept for
    the life of the process, holding one of ``AGUI_MAX_STREAMS`` (found by review)."""
    async with serving(kafka, keepalive_s=1.0, max_streams=2) as app:
        request_id = f"q-{uuid.uuid4().hex}"
        body, admitted_at = await run_to_its_end(app, backstage, request_id)
        view = app.relay.threads
        reads = 0
        read = view.get

        def failing_after_the_check(thread_id: str) -> ThreadState | None:
            nonlocal reads
            reads += 1
            if reads > 1:  # the tenancy check read it; the opening's read fails
                raise RetryLater("thread_store_unavailable", "the store failed", 30)
            return read(thread_id)

        monkeypatch.setattr(view, "get", failing_after_the_check)
        for _ in range(3):
            reads = 0
            again = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=body,
                                                      headers=as_forwarded(request_id)))
            await replay_admission(backstage, await backstage.next_request(), admitted_at)
            response = await again
            assert response.status_code == 503, response.text
            assert response.json()["code"] == "thread_store_unavailable"
            assert app.relay.fanout.stream_count == 0


async def test_a_replay_of_a_run_over_whose_records_are_gone_is_answered(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """The fan-out remembers admitting the run, which had made the replay route take it
    for live and wait for it for ever; it read the run's end too: 404."""
    async with serving(kafka, keepalive_s=1.0) as app:
        body, _ = await run_to_its_end(app, backstage, f"q-{uuid.uuid4().hex}")
        async with asyncio.timeout(ANSWER_S):
            replayed = await app.http.get(
                f"/threads/{body['threadId']}/runs/{body['runId']}/events")
        assert replayed.status_code == 404, replayed.text
        assert replayed.json()["code"] == "unknown_run"
        assert app.relay.fanout.stream_count == 0


def remembering(thread_id: str, run_id: str) -> ThreadState:
    """An idle thread whose last run is ``run_id``, admitted a few seconds ago."""
    now = datetime.now(UTC)
    decision = RememberedDecision(request_id=f"q-{uuid.uuid4().hex}", run_id=run_id,
                                  verdict="admitted", message="admitted",
                                  decided_at=now - timedelta(seconds=5))
    return ThreadState(thread_id=thread_id, status="idle", run_id=run_id,
                       recent_run_ids=[run_id], recent_decisions=[decision], updated_at=now)


async def wait_for_state(relay: Relay, thread_id: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while relay.threads.get(thread_id) is None:
            await asyncio.sleep(0.05)


async def test_a_request_sent_again_for_a_run_its_thread_is_past_is_answered(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """An instance that never saw the run (started after it, or it ran on another
    owner): the thread view says it is over, so a replayed admission with nothing on
    the log is answered 404, not waited for live."""
    body = run_input(f"past-{uuid.uuid4().hex[:8]}")
    thread_id, run_id = str(body["threadId"]), str(body["runId"])
    state = remembering(thread_id, run_id)
    await backstage.emit(thread_id, run_id, [started(thread_id, run_id),
                                             finished(thread_id, run_id)])
    await backstage.write_state(state, thread_id)
    await delete_thread_records(kafka, thread_id)
    async with serving(kafka, keepalive_s=1.0) as app:
        await wait_for_state(app.relay, thread_id)
        request_id = state.recent_decisions[0].request_id
        again = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=body,
                                                  headers=as_forwarded(request_id)))
        await replay_admission(backstage, await backstage.next_request(),
                               state.recent_decisions[0].decided_at)
        async with asyncio.timeout(ANSWER_S):
            response = await again
        assert response.status_code == 404, response.text
        assert response.json()["code"] == "unknown_run"
        assert app.relay.fanout.stream_count == 0
