"""Fixtures of the consumer-service tests: per-test topics and the backstage player."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from consumer_harness import Backstage, kafka_settings

from services.runtime.settings import KafkaSettings


@pytest.fixture
def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    return kafka_settings(kafka_bootstrap, topic_prefix)


@pytest.fixture
async def backstage(kafka: KafkaSettings) -> AsyncIterator[Backstage]:
    player = Backstage(kafka)
    await player.start()
    try:
        yield player
    finally:
        await player.stop()
