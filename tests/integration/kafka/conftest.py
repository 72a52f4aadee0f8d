"""Fixtures of the Kafka-client suite: settings for one test's own topics."""

from __future__ import annotations

import pytest

from services.runtime.settings import KafkaSettings


@pytest.fixture
def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    """This test's topics (a unique prefix), one partition each unless a module says more."""
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                         partitions=1)
