"""A replay with ``Last-Event-ID`` reads from near that event, not the whole run again.

A client reconnecting with the last sequence number of a run of 1,000,000
events was answered ``204`` after 7.5 s: the replay read the run from its
start and skipped record by record, about a million records per reconnect
(``agui_consumer_log_records_scanned_total{reason="replay"}``), so an
``EventSource`` that kept reconnecting near the end of a long run cost its
whole length each time. These tests write a run of ``RECORDS`` one-character
deltas straight onto the thread's partition, as a worker's producer would,
and reconnect at its end, past it, and in its middle: the same answers as
before (204; every event after the id, once, in order), for a bounded read.
"""

from __future__ import annotations

import uuid

import orjson
import pytest
from consumer_harness import Backstage, serving, sse_frames
from long_runs import long_run
from slow_sse import counter, until
from test_consumer_replay_scans import remembering

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

RECORDS = 40_000
BOUND = RECORDS // 10
"""Most records a reconnect at a run's end may read (it read the run, RECORDS + 4)."""
AGENT = "scripted"


async def test_reconnecting_at_a_long_runs_end_does_not_read_the_run_again(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = f"long-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    last = await long_run(backstage, thread, run, RECORDS)
    await backstage.write_state(remembering(thread, run), thread)
    answers, reads = [], []
    async with serving(kafka) as app:
        await until(lambda: app.relay.threads.get(thread) is not None, "the thread's state")
        for after in (last, last + 1_000):  # its last event, and an id it never had
            before = counter(app.relay, "agui_consumer_log_records_scanned_total",
                             reason="replay")
            response = await app.http.get(f"/threads/{thread}/runs/{run}/events",
                                          headers={"Last-Event-ID": str(after)}, timeout=120)
            answers.append((response.status_code, response.content))
            reads.append(counter(app.relay, "agui_consumer_log_records_scanned_total",
                                 reason="replay") - before)
    assert answers == [(204, b""), (204, b"")], answers
    assert max(reads) < BOUND, (
        f"answering 204 at the end of a run of {RECORDS} events read {reads} records: "
        "every reconnect of a client near the end of a run costs its whole length")


async def test_reconnecting_in_a_long_runs_middle_gets_the_rest_once_in_order(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    thread, run = f"long-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    last = await long_run(backstage, thread, run, RECORDS)
    await backstage.write_state(remembering(thread, run), thread)
    after = RECORDS // 2
    async with serving(kafka) as app:
        await until(lambda: app.relay.threads.get(thread) is not None, "the thread's state")
        before = counter(app.relay, "agui_consumer_log_records_scanned_total", reason="replay")
        response = await app.http.get(f"/threads/{thread}/runs/{run}/events",
                                      headers={"Last-Event-ID": str(after)}, timeout=120)
        read = counter(app.relay, "agui_consumer_log_records_scanned_total",
                       reason="replay") - before
    assert response.status_code == 200, response.text[:300]
    frames = [f for f in sse_frames(response.content) if "data" in f]
    assert [int(f["id"]) for f in frames] == list(range(after + 1, last + 1))
    assert [orjson.loads(f["data"])["type"] for f in frames[-2:]] == \
        ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert read < last - after + BOUND, f"the replay read {read:.0f} records"
