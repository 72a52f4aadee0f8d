"""Metadata refreshes while a partition has no leader are paced, not looped.

A producer holding a record for a topic deleted under it asks for metadata to
find the partition's leader. aiokafka 0.14's sender asked again as soon as each
answer came, and the broker answers "unknown topic" at once: 34,000
metadata refreshes a second, 15 to 22 % of a core (found by probing, the consumer
service while ``events`` was missing). Now at most one per retry backoff (100 ms).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from services.kafka.clients import NewTopic, new_admin, new_producer
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

WATCHED_S = 3.0


async def test_a_producer_waiting_for_a_deleted_topic_asks_for_metadata_at_a_pace(
        kafka: KafkaSettings) -> None:
    topic = f"{kafka.topic_prefix}.deleted-under-a-producer"
    admin = new_admin(kafka, "test-pacing")
    await admin.start()
    producer = new_producer(kafka, "test-pacing")
    await producer.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await (await producer.send(topic, b"before", key=b"k"))
        await admin.delete_topics([topic])
        while topic in await admin.list_topics():
            await asyncio.sleep(0.1)
        client: Any = producer.client
        update = client._metadata_update
        asked = 0

        async def counted(*args: Any) -> bool:
            nonlocal asked
            asked += 1
            return bool(await update(*args))

        client._metadata_update = counted
        waiting = await producer.send(topic, b"after", key=b"k")  # held: no leader
        began = time.monotonic()
        await asyncio.sleep(WATCHED_S)
        watched = time.monotonic() - began
        assert not waiting.done()
        await admin.create_topics([NewTopic(topic, 1, 1)])  # the record goes: a quick stop
    finally:
        await producer.stop()
        await admin.close()
    assert 0 < asked <= watched / 0.1 + 2, f"{asked} metadata refreshes in {watched:.1f} s"
