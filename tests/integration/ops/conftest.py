"""Fixtures for the operator commands: fresh topics on the real broker and a record writer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from ops_support import PARTITIONS, Writer

from services.kafka.admin import ensure_topics
from services.kafka.clients import new_producer
from services.runtime.settings import KafkaSettings


@pytest.fixture
async def ops_settings(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    """Settings under a fresh prefix, with every topic created (4 partitions)."""
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                             partitions=PARTITIONS)
    await ensure_topics(settings, ("scripted", "approval"))
    return settings


@pytest.fixture
async def writer(ops_settings: KafkaSettings) -> AsyncIterator[Writer]:
    producer = new_producer(ops_settings, "ops-test-writer")
    await producer.start()
    try:
        yield Writer(ops_settings, producer)
    finally:
        await producer.stop()
