"""``retention_losses``: a group member whose committed offset retention passed says what it lost.

A group commits offset 1 of a partition holding five records; delete-records
then removes the first four (as a short ``retention.ms`` would) and a member
of the group starts again. aiokafka resets it to the earliest offset, 4; the
offsets 1..3 were never read: an ERROR names the group, topic, partition and
offsets, and ``agui_records_lost_to_retention_total`` counts three. A reader
without a group that seeks below the start is left to check for itself.
"""

from __future__ import annotations

import logging

import pytest
from aiokafka.admin import RecordsToDelete
from aiokafka.structs import OffsetAndMetadata
from prometheus_client import REGISTRY

from services.kafka import retention_losses
from services.kafka.admin import ensure_topics
from services.kafka.clients import TopicPartition, new_admin, new_consumer, new_producer
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


@pytest.fixture
async def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                             partitions=1)
    await ensure_topics(settings, ())
    producer = new_producer(settings, "retention-losses")
    await producer.start()
    try:
        for n in range(5):
            await producer.send_and_wait(settings.topics.requests, b"%d" % n, key=b"k")
    finally:
        await producer.stop()
    admin = new_admin(settings)
    await admin.start()
    try:
        await admin.delete_records(
            {TopicPartition(settings.topics.requests, 0): RecordsToDelete(4)}, timeout_ms=10_000)
    finally:
        await admin.close()
    return settings


def lost_count(group: str, topic: str) -> float:
    found = REGISTRY.get_sample_value("agui_records_lost_to_retention_total",
                                      {"group": group, "topic": topic})
    return found or 0.0


async def first_read(kafka: KafkaSettings, group: str | None, commit: int | None) -> int:
    """The offset of the first record a consumer (of ``group``) reads from ``commit``."""
    tp = TopicPartition(kafka.topics.requests, 0)
    consumer = new_consumer(kafka, "retention-losses", group_id=group)
    await consumer.start()
    try:
        consumer.assign([tp])
        if group is not None and commit is not None:
            await consumer.commit({tp: OffsetAndMetadata(commit, "")})
        elif commit is not None:
            consumer.seek(tp, commit)
        records = (await consumer.getmany(tp, timeout_ms=10_000)).get(tp, [])
        return records[0].offset
    finally:
        await consumer.stop()


async def test_a_group_behind_the_log_start_logs_and_counts_what_it_lost(
        kafka: KafkaSettings, topic_prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    group, topic = f"{topic_prefix}.lost", kafka.topics.requests
    before = lost_count(group, topic)
    with caplog.at_level(logging.ERROR, logger=retention_losses.__name__):
        assert await first_read(kafka, group, commit=1) == 4
    said = [r.getMessage() for r in caplog.records if r.name == retention_losses.__name__]
    assert len(said) == 1, said
    assert f"group {group}: {topic} partition 0 offsets 1..3 (3)" in said[0], said
    assert lost_count(group, topic) - before == 3


async def test_a_reader_without_a_group_is_left_to_check_itself(
        kafka: KafkaSettings, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger=retention_losses.__name__):
        assert await first_read(kafka, None, commit=1) == 4
    assert not [r for r in caplog.records if r.name == retention_losses.__name__]


def test_only_a_reset_forward_loses_records() -> None:
    assert retention_losses.lost(1, 4) == range(1, 4)
    assert retention_losses.lost(4, 4) is None
    assert retention_losses.lost(9, 0) is None  # past the end (a topic re-created): read again
