"""A run's stream holds at most ``AGUI_STREAM_QUEUE_BYTES`` of events, and no event over
``AGUI_MAX_RECORD_BYTES`` reaches a client.

The buffer counted events only: a client reading nothing had the instance
hold ``AGUI_STREAM_QUEUE`` (2,048) events of up to a record's limit (1 MiB)
each for its one stream, 2 GiB (100 events of 1 MB: 100 MB held). Now a
full byte budget sends the stream to the log, as a full queue does, and the
client still gets every event, in order, once it reads.

The broker's ``max.message.bytes`` counts a batch's compressed bytes, so
another writer can put a value of 20 MB on ``events`` as 20 KB of gzip; it
reached the client as one 20 MB SSE frame. It is skipped now, with a warning,
like a value that is not a JSON object, and the rest of the run streams.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer
from consumer_harness import AGENT, Backstage, finished, serving
from slow_sse import BufferPeak, SseReader, emit_pads, open_run, slow_http

from contracts import EventHeaders
from services.consumer.ordering import KEEPALIVE
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

EVENTS = 100
PAD = 1_000_000
"""A CUSTOM event of ~1 MB: a record within AGUI_MAX_RECORD_BYTES (1,048,576)."""
BUDGET = 8 << 20


async def test_a_stream_of_record_sized_events_holds_its_byte_budget_and_loses_nothing(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, stream_queue_bytes=BUDGET) as app, \
            slow_http(app.url) as http:
        thread_id, run_id, reader = await open_run(http, backstage)
        async with BufferPeak(app.relay) as peak:
            await emit_pads(backstage, thread_id, run_id, 1, EVENTS, PAD)
            await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)],
                                 seqs=[EVENTS + 1])
            await asyncio.sleep(1.0)  # the fan-out routes what was written, unread
            await reader.read_to_end()
        await reader.response.aclose()
    assert peak.byte_peak <= BUDGET, (
        f"one stream whose client read nothing held {peak.byte_peak:,} bytes of events "
        f"({EVENTS} events of ~{PAD:,} bytes; AGUI_STREAM_QUEUE_BYTES {BUDGET:,})")
    assert [seq for seq, _ in reader.frames] == list(range(EVENTS + 2)), reader.frames[-3:]
    assert reader.frames[-1][1] == "RUN_FINISHED"


async def test_an_event_past_the_record_limit_is_not_streamed_the_rest_is(
        kafka: KafkaSettings, backstage: Backstage, caplog: pytest.LogCaptureFixture) -> None:
    size = 20 << 20
    async with serving(kafka) as app, slow_http(app.url) as http:
        thread_id, run_id, reader = await open_run(http, backstage)
        value = orjson.dumps({"type": "CUSTOM", "name": "pad", "value": "p" * size})
        writer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers,
                                  compression_type="gzip", max_request_size=64 << 20)
        await writer.start()
        try:
            await writer.send_and_wait(kafka.topics.events, value, key=thread_id.encode(),
                                       headers=EventHeaders(run_id, "CUSTOM", AGENT, 1).encode())
        finally:
            await writer.stop()
        await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)], seqs=[2])
        largest = 0
        async with asyncio.timeout(60):
            async for chunk in reader.response.aiter_raw():
                reader._pending += chunk
                largest = max(largest, *(len(b) for b in reader._pending.split(b"\n\n")))
                if b'"RUN_FINISHED"' in chunk:
                    break
        await reader.response.aclose()
    assert largest <= kafka.max_record_bytes, (
        f"the client got an SSE frame of {largest:,} bytes from an events record past "
        f"AGUI_MAX_RECORD_BYTES ({kafka.max_record_bytes:,})")
    assert "more than a record may (AGUI_MAX_RECORD_BYTES" in caplog.text


async def _raw_until_end(reader: SseReader, within_s: float) -> bytes:
    """The body's bytes until it ends (or breaks off), at most ``within_s``."""
    raw = b""
    with contextlib.suppress(httpx.RemoteProtocolError, httpx.ReadError, TimeoutError):
        async with asyncio.timeout(within_s):
            async for chunk in reader._chunks:  # the body's reader, where it left off
                raw += chunk
    return raw


async def test_an_event_over_the_whole_budget_goes_to_the_log_at_once(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """An event heavier than the whole budget fits in no buffer, not even an empty one:
    the stream fell behind, but its body, waiting on the empty buffer, was not woken and
    sent a keep-alive first, a whole ``AGUI_KEEPALIVE_S`` later (15 s at the default)."""
    budget = 65_536
    async with serving(kafka, stream_queue_bytes=budget, keepalive_s=10.0) as app, \
            slow_http(app.url) as http:
        thread_id, run_id, reader = await open_run(http, backstage)
        await reader.read_until(0)  # up to date: its body waits on an empty buffer
        await asyncio.sleep(0.5)
        await emit_pads(backstage, thread_id, run_id, 1, 1, 4 * budget)
        await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)], seqs=[2])
        raw = reader._pending + await _raw_until_end(reader, 60)
    assert b'"RUN_FINISHED"' in raw, raw[-200:]
    assert KEEPALIVE not in raw, "a keep-alive went out before the event that did not fit"
    assert raw.count(b"id: ") == 2, raw[:200]  # the pad and the RUN_FINISHED
