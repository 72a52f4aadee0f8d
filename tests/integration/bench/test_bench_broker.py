"""On a broker the benchmarks did not start, the topics they made are deleted afterwards,
and no other topic: a long-lived broker does not collect a benchmark's partitions."""

from __future__ import annotations

import pytest

from bench import broker as bench_broker
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_admin
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def topics(bootstrap: str) -> set[str]:
    admin = new_admin(KafkaSettings(bootstrap_servers=bootstrap), "bench-broker-test")
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def test_only_the_topics_of_the_prefixes_handed_out_are_deleted(
        kafka_bootstrap: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    other = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                          partitions=1)
    await ensure_topics(other, ())
    with bench_broker.broker() as bootstrap:  # an event loop runs here, as in the async benchmarks
        assert bootstrap == kafka_bootstrap
        prefix = bench_broker.topic_prefix("unit")
        made = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix, partitions=1)
        await ensure_topics(made, ("scripted",))
        await ensure_topics(made.with_prefix(made.topic_prefix + "floor"), ())
        assert made.topics.events in await topics(bootstrap)
    left = await topics(kafka_bootstrap)
    assert not {t for t in left if t.startswith(made.topic_prefix)}
    assert other.topics.events in left

