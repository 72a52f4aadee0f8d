"""The throughput benchmarks' load: the lean SSE client and the stand-in's batched writes.

The client counts ``data:`` frames in raw socket reads, so a frame split between
two reads must count once and a response's error must come back as one; the
stand-in writes each run as record batches of its own making, so every event
must land in order, keyed by its thread, with the headers a worker writes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import orjson
import pytest
from aiokafka import ConsumerRecord, TopicPartition
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from bench.consumer_standin import events, send_run
from bench.sse_client import post_sse
from contracts import EventHeaders
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_consumer, new_producer
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings
from tests.asgi_server import served

pytestmark = pytest.mark.integration

FRAMES = 700


def sse_app() -> Starlette:
    async def run(request: Request) -> Response:
        body = orjson.loads(await request.body())
        if body.get("refuse"):
            return PlainTextResponse("busy", status_code=503)
        frames = b"".join(b'id: %d\ndata: {"type":"TEXT_MESSAGE_CONTENT","delta":"x"}\n\n' % i
                          for i in range(FRAMES - 1))
        if not body.get("cut"):
            frames += b'data: {"type":"RUN_FINISHED"}\n\n'

        async def pieces() -> AsyncIterator[bytes]:
            sent = 0
            for size in itertools.cycle((1, 2, 3, 5, 7, 4099, 65537)):  # "data: " cut every way
                if sent == len(frames):
                    return
                yield frames[sent:sent + size]
                sent += len(frames[sent:sent + size])
                await asyncio.sleep(0)

        return StreamingResponse(pieces(), media_type="text/event-stream")

    return Starlette(routes=[Route("/run", run, methods=["POST"])])


async def test_the_client_counts_every_frame_however_the_body_is_cut() -> None:
    async with served(sse_app()) as port:
        url = f"http://127.0.0.1:{port}"
        assert await post_sse(url, "/run", {}) == (FRAMES, None)
        assert await post_sse(url, "/run", {"cut": True}) == (FRAMES - 1, "no RUN_FINISHED")
        assert await post_sse(url, "/run", {"refuse": True}) == (0, "HTTP 503")


async def test_the_standin_writes_a_run_in_order_keyed_and_with_a_workers_headers(
        kafka_bootstrap: str, topic_prefix: str) -> None:
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                          partitions=3)
    await ensure_topics(kafka, ())
    topic, thread, run, tokens = kafka.topics.events, "t-standin", "r-1", 2_000
    partition = partition_for(thread, 3)
    producer = new_producer(kafka, "standin-test")
    await producer.start()
    try:  # 2,000 tokens: more than one batch of the producer's size
        await send_run(producer, topic, partition, thread, run, "scripted", tokens)
        await producer.flush()
    finally:
        await producer.stop()
    expected = events(thread, run, tokens)
    consumer = new_consumer(kafka, "standin-test", group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    got: list[ConsumerRecord[bytes, bytes]] = []
    try:
        async with asyncio.timeout(30):
            while len(got) < len(expected):
                got += (await consumer.getmany(tp, timeout_ms=1000)).get(tp, [])
    finally:
        await consumer.stop()
    assert [orjson.loads(r.value) for r in got] == expected
    assert {r.key for r in got} == {thread.encode()}
    assert [EventHeaders.decode(r.headers) for r in got] == [
        EventHeaders(run, e["type"], "scripted", seq) for seq, e in enumerate(expected)]
