"""A slow client's stream whose next events retention removed is broken off, never ended.

The client falls a full queue behind, so its stream is to go on from the
events topic; before it gets there, delete-records removes all but the run's
last records (as a short ``retention.ms`` does). The log reader finds its
offset gone: the connection is aborted (the client sees an error, not an
end, and asks again with ``Last-Event-ID``), where it had gone on from the
partition's first offset, skipping the lost events to the run's end: a
stream that looked whole.
"""

from __future__ import annotations

import asyncio

import pytest
from consumer_harness import Backstage, finished, serving
from slow_sse import emit_pads, open_run, slow_http, until
from test_consumer_runs_gone import delete_thread_records
from test_consumer_slow_clients import HALF, PAD, QUEUE, sample

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

KEPT = 50
"""Records left at the end of the run's partition: the last pads and the run's end."""


async def test_a_stream_behind_whose_events_are_gone_is_broken_off(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, stream_queue=QUEUE) as app, slow_http(app.url) as http:
        relay = app.relay
        thread_id, run_id, reader = await open_run(http, backstage)
        await emit_pads(backstage, thread_id, run_id, 1, HALF, PAD)
        await until(lambda: sample(relay, "streams_to_log_total") >= 1, "never behind")
        await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)], seqs=[HALF + 1])
        await asyncio.sleep(0.5)  # the fan-out routed the end: it is behind the stream too
        await delete_thread_records(kafka, thread_id, keep=KEPT)
        await reader.read_to_end()
    ids = [seq for seq, _ in reader.frames]
    assert reader.cut, f"ended as if whole after ids {ids[:3]}..{ids[-3:]}"
    assert ids == list(range(len(ids))), "a gap sent as if nothing were missing"
    assert "RUN_FINISHED" not in [kind for _, kind in reader.frames]
