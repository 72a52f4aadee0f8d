"""``poll_until``: a long poll that records or the stop end, and that loses nothing stopped.

Every wait here is bounded far below the poll's own timeout (an hour), so a
poll that only its timeout could end fails the test instead of holding it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from services.kafka.admin import ensure_topics
from services.kafka.clients import AIOKafkaConsumer, TopicPartition, new_consumer, new_producer
from services.kafka.polling import poll_until
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
BOUND_S = 20.0



@pytest.fixture
async def reader(kafka: KafkaSettings) -> AsyncIterator[AIOKafkaConsumer]:
    await ensure_topics(kafka, ())
    consumer = new_consumer(kafka, "polling", group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([TopicPartition(kafka.topics.requests, 0)])
    try:
        yield consumer
    finally:
        await consumer.stop()


async def produce(kafka: KafkaSettings, *values: bytes) -> None:
    producer = new_producer(kafka, "polling")
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(kafka.topics.requests, value, key=b"k")
    finally:
        await producer.stop()


def values(got: dict[TopicPartition, list[object]]) -> list[bytes]:
    return [r.value for records in got.values() for r in records]  # type: ignore[attr-defined]


async def test_records_end_a_long_poll(kafka: KafkaSettings, reader: AIOKafkaConsumer) -> None:
    stop = asyncio.Event()
    poll = asyncio.create_task(poll_until(reader, stop, timeout_ms=HOUR_MS))
    await asyncio.sleep(0.5)  # the poll waits for records now
    await produce(kafka, b"one")
    async with asyncio.timeout(BOUND_S):
        got = await poll
    assert values(got) == [b"one"]


async def test_a_stop_ends_a_long_poll_and_what_it_did_not_return_is_read_next(
        kafka: KafkaSettings, reader: AIOKafkaConsumer) -> None:
    stop = asyncio.Event()
    poll = asyncio.create_task(poll_until(reader, stop, timeout_ms=HOUR_MS))
    await asyncio.sleep(0.5)
    stop.set()
    async with asyncio.timeout(BOUND_S):
        assert await poll == {}
    assert await poll_until(reader, stop, timeout_ms=HOUR_MS) == {}  # stopped: no wait
    await produce(kafka, b"after")
    async with asyncio.timeout(BOUND_S):
        got = await poll_until(reader, asyncio.Event(), timeout_ms=HOUR_MS)
    assert values(got) == [b"after"]


async def test_a_cancelled_poll_leaves_the_consumer_usable(
        kafka: KafkaSettings, reader: AIOKafkaConsumer) -> None:
    poll = asyncio.create_task(poll_until(reader, asyncio.Event(), timeout_ms=HOUR_MS))
    await asyncio.sleep(0.5)
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    await produce(kafka, b"still")
    async with asyncio.timeout(BOUND_S):
        got = await poll_until(reader, asyncio.Event(), timeout_ms=HOUR_MS)
    assert values(got) == [b"still"]
