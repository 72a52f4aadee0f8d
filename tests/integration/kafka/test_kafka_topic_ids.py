"""A store restored from a topic deleted and created again is rebuilt, not trusted.

The new topic's offsets start over: once it has grown past the store's old
checkpoint, offsets alone would read the store as a delta of it (a thread's
old state, an interrupt long answered or one never raised, decided on). The
topic id (metadata v12, ``topic_ids``) tells them apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import NewTopic

from services.kafka.clients import new_admin, new_producer
from services.kafka.lookup import client_of
from services.kafka.topic_ids import topic_ids
from services.runtime.settings import KafkaSettings
from services.state.changelog import catch_up
from services.state.disk import Change, PartitionStore

pytestmark = pytest.mark.integration



def as_changes(_: int, records: Sequence[Any]) -> list[Change]:
    return [(r.key, r.value, None) for r in records]


async def recreated(kafka: KafkaSettings, topic: str, *, delete: bool) -> str:
    """The topic (one partition, compacted) created, after deleting it; its id."""
    admin = new_admin(kafka, "topic-ids-test")
    await admin.start()
    try:
        if delete:
            await admin.delete_topics([topic])
            while topic in await topic_ids(client_of(admin), [topic]):
                await asyncio.sleep(0.1)
        while True:  # a delete still under way refuses the create for a moment
            try:
                await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
                    "cleanup.policy": "compact"})])
                break
            except Exception:
                await asyncio.sleep(0.2)
        while not (ids := await topic_ids(client_of(admin), [topic])):
            await asyncio.sleep(0.1)
        return ids[topic]
    finally:
        await admin.close()


async def write(kafka: KafkaSettings, topic: str, pairs: list[tuple[bytes, bytes]]) -> None:
    producer = new_producer(kafka, "topic-ids-writer")
    await producer.start()
    try:
        for key, value in pairs:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


async def test_topic_ids_name_existing_topics_only(kafka: KafkaSettings) -> None:
    topic = f"{kafka.topic_prefix}.ids"
    made = await recreated(kafka, topic, delete=False)
    admin = new_admin(kafka, "topic-ids-test")
    await admin.start()
    try:
        assert await topic_ids(client_of(admin), [topic, f"{topic}.absent"]) == {topic: made}
    finally:
        await admin.close()


async def test_a_store_of_a_topic_recreated_and_grown_past_its_checkpoint_is_rebuilt(
        kafka: KafkaSettings, tmp_path: Path) -> None:
    topic = f"{kafka.topic_prefix}.changelog"
    first = await recreated(kafka, topic, delete=False)
    await write(kafka, topic, [(b"victim", b"old"), *((f"k{n}".encode(), b"1") for n in range(9))])
    store = PartitionStore.open(tmp_path / "p0", 0)
    done = await catch_up(kafka, topic, {0: (store, None)}, as_changes, "topic-ids-test")
    assert (done[0].plan.full, store.checkpoint, store.topic_id) == (True, 10, first)
    assert store.get(b"victim") == b"old"

    second = await recreated(kafka, topic, delete=True)
    assert second != first
    await write(kafka, topic, [(f"n{n}".encode(), b"2") for n in range(30)])  # past 10
    done = await catch_up(kafka, topic, {0: (store, None)}, as_changes, "topic-ids-test")
    assert done[0].plan.full, done[0].plan.reason
    assert "deleted and created again" in done[0].plan.reason
    assert (store.checkpoint, store.topic_id) == (30, second)
    assert store.get(b"victim") is None  # nothing of the old topic is left
    assert store.get(b"n29") == b"2"

    await write(kafka, topic, [(b"later", b"3")])
    done = await catch_up(kafka, topic, {0: (store, None)}, as_changes, "topic-ids-test")
    assert (done[0].plan.full, done[0].records, store.get(b"later")) == (False, 1, b"3")
    store.close()
