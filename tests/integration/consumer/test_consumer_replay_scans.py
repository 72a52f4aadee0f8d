"""A replay reads only what it must, and reads from a partition's beginning only so often.

``GET /threads/{id}/runs/{runId}/events`` for a run the instance has not
indexed read the thread's partition from its beginning: a tenant naming
runIds at random on its own thread made the instance read a retention's worth
of every thread's records per request, as many at once as it sent. Now a run
its thread remembers is read from its admission on (by the records'
timestamps), and reads from the beginning (a run older than its thread's
memory, a runId that never ran) are capped per instance
(``AGUI_REPLAY_FULL_SCANS``): one more is answered ``503 replay_busy`` with
``Retry-After``, and every other replay and stream is served meanwhile. The
partition holds 3,000 records an hour old before the runs asked for; no
replay index (``AGUI_REPLAY_INDEX_SIZE=0``), as for runs another instance
routed or the index has let go.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from consumer_harness import Backstage, data_values, finished, serving, started
from slow_sse import SseReader, counter, slow_http, until

from contracts import EventHeaders, ThreadState
from contracts.records import RememberedDecision
from services.consumer.lookback import BUSY_RETRY_AFTER_S
from services.consumer.relay import Relay
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

OLD_RECORDS = 3000
OLD_RUN = "run-of-an-hour-ago"
PAD = 4096
"""Bytes of each old record: 12 MB in all, more than a stalled client's socket buffers
hold, so a replay of the old run stays open while its client does not read."""


async def history(backstage: Backstage, thread_id: str) -> None:
    """``OLD_RECORDS`` events of ``OLD_RUN`` on the thread's partition, an hour old."""
    kafka = backstage.kafka
    an_hour_ago = int((time.time() - 3600) * 1000)
    value = orjson.dumps({"type": "CUSTOM", "name": "old", "value": "p" * PAD})
    sent = [await backstage.producer.send(
        kafka.topics.events, value, key=thread_id.encode(),
        headers=EventHeaders(OLD_RUN, "CUSTOM", "scripted", i).encode(),
        timestamp_ms=an_hour_ago) for i in range(OLD_RECORDS)]
    await asyncio.gather(*sent)


def remembering(thread_id: str, run_id: str) -> ThreadState:
    """An idle thread whose last run is ``run_id``, admitted a few seconds ago."""
    now = datetime.now(UTC)
    decision = RememberedDecision(request_id=uuid.uuid4().hex, run_id=run_id,
                                  verdict="admitted", message="admitted",
                                  decided_at=now - timedelta(seconds=5))
    return ThreadState(thread_id=thread_id, status="idle", run_id=run_id,
                       recent_run_ids=[run_id], recent_decisions=[decision], updated_at=now)


async def thread_with_history(backstage: Backstage) -> tuple[str, str]:
    """A thread whose partition holds ``history``, then one run it remembers, finished."""
    thread, run = f"rs-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    await history(backstage, thread)
    await backstage.emit(thread, run, [started(thread, run), finished(thread, run)])
    await backstage.write_state(remembering(thread, run), thread)
    return thread, run


def scanned(relay: Relay, reason: str) -> float:
    return counter(relay, "agui_consumer_log_records_scanned_total", reason=reason)


async def test_a_run_its_thread_remembers_is_read_from_its_admission_on(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = await thread_with_history(backstage)
    async with serving(kafka, replay_index_size=0) as app:
        await until(lambda: app.relay.threads.get(thread) is not None, "the thread's state")
        response = await app.http.get(f"/threads/{thread}/runs/{run}/events")
        seek, full = scanned(app.relay, "replay"), scanned(app.relay, "replay_full")
    assert response.status_code == 200, response.text
    assert [orjson.loads(v)["type"] for v in data_values(response.content)] == \
        ["RUN_STARTED", "RUN_FINISHED"]
    assert (seek, full) == (2, 0), f"the replay read {seek:.0f} + {full:.0f} records"


async def test_reads_from_the_beginning_are_capped_and_the_rest_is_served(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = await thread_with_history(backstage)
    async with serving(kafka, replay_index_size=0, replay_full_scans=1) as app:
        await until(lambda: app.relay.threads.get(thread) is not None, "the thread's state")
        async with slow_http(app.url) as slow:
            # the old run is older than its thread remembers: read from the beginning,
            # by a client that stops reading after its first frame
            request = slow.build_request("GET", f"/threads/{thread}/runs/{OLD_RUN}/events")
            held = await slow.send(request, stream=True)
            assert held.status_code == 200
            reader = SseReader(held)
            await reader.read_until(0)
            busy = await app.http.get(f"/threads/{thread}/runs/never-ran/events")
            served = await app.http.get(f"/threads/{thread}/runs/{run}/events")
            assert app.relay.full_scans.free == 0
            await held.aclose()
        await until(lambda: app.relay.full_scans.free == 1, "the slot given back")
        before = scanned(app.relay, "replay_full")
        unknown = await app.http.get(f"/threads/{thread}/runs/never-ran/events")
        read = scanned(app.relay, "replay_full") - before
    assert (busy.status_code, busy.json()["code"]) == (503, "replay_busy"), busy.text
    assert busy.headers["retry-after"] == str(BUSY_RETRY_AFTER_S)
    assert served.status_code == 200, served.text
    assert [orjson.loads(v)["type"] for v in data_values(served.content)] == \
        ["RUN_STARTED", "RUN_FINISHED"]
    assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_run"), unknown.text
    assert read == OLD_RECORDS + 2, f"the full scan read {read:.0f} records"
