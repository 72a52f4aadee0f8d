"""Fixtures for the producer's broker tests: fresh topics and a relay over them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from producer_harness import Relay

from services.kafka.admin import ensure_topics
from services.kafka.clients import AIOKafkaProducer, new_producer
from services.producer.checkpoint_disk import CheckpointDisk
from services.runtime.settings import KafkaSettings

AGENTS = ("approval", "scripted", "planner")


@pytest.fixture
async def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    """Settings under a fresh prefix, every topic created (4 partitions)."""
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                             partitions=4)
    await ensure_topics(settings, AGENTS)
    return settings


@pytest.fixture
async def relay(kafka: KafkaSettings) -> AsyncIterator[Relay]:
    async with Relay(kafka) as relay:
        yield relay


@pytest.fixture
async def producers(kafka: KafkaSettings) -> AsyncIterator[list[AIOKafkaProducer]]:
    """Two started producers: two workers' writes to the checkpoints."""
    made = [new_producer(kafka, f"worker-{i}") for i in range(2)]
    for p in made:
        await p.start()
    try:
        yield made
    finally:
        for p in made:
            await p.stop()


@pytest.fixture
def disks() -> Iterator[list[CheckpointDisk]]:
    """On-disk stores made by a test (closed after it)."""
    made: list[CheckpointDisk] = []
    yield made
    for disk in made:
        disk.close()
