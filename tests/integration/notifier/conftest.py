"""Fixtures for the notifier's integration tests: fresh topics on the real broker, a writer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from notifier_support import Threads

from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

PARTITIONS = 2


@pytest.fixture
async def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    """Settings under a fresh prefix with every topic created (2 partitions)."""
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                             partitions=PARTITIONS)
    await ensure_topics(settings)
    return settings


@pytest.fixture
async def threads(kafka: KafkaSettings) -> AsyncIterator[Threads]:
    async with Threads(kafka) as t:
        yield t
