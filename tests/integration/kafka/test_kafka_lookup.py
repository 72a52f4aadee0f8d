"""``existing``: which named topics exist, asked by name on the real broker.

Names outside Kafka's rule are not asked (a hostile agent name of 10,000
characters costs nothing), long lists are asked a hundred at a time, and the
request itself says it creates nothing: on a cluster with
``auto.create.topics.enable`` (Kafka's default; this broker has it off) a
plain metadata request for a missing name would create it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiokafka.protocol.metadata import MetadataRequest_v4, MetadataRequest_v5

from services.kafka.admin import ensure_topics
from services.kafka.clients import AIOKafkaAdminClient, new_admin
from services.kafka.lookup import MAX_NAMES, client_of, existing, lookup_request
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration



@pytest.fixture
async def admin(kafka: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    await ensure_topics(kafka, ("present",))
    client = new_admin(kafka, "lookup-test")
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def test_only_the_existing_names_come_back(kafka: KafkaSettings,
                                                 admin: AIOKafkaAdminClient) -> None:
    topics = kafka.topics
    asked = [topics.requests, topics.dispatch("present"), topics.dispatch("absent"),
             "bad/name", "x" * 10_000, ""]
    assert await existing(client_of(admin), asked) == {topics.requests,
                                                       topics.dispatch("present")}
    assert await existing(client_of(admin), []) == frozenset()


async def test_a_long_list_is_asked_in_parts(kafka: KafkaSettings,
                                             admin: AIOKafkaAdminClient) -> None:
    topics = kafka.topics
    missing = [topics.dispatch(f"absent{i}") for i in range(2 * MAX_NAMES + 7)]
    found = await existing(client_of(admin), [*missing, topics.events, topics.threads])
    assert found == {topics.events, topics.threads}
    # nothing asked about was created
    assert set(missing).isdisjoint(await admin.list_topics())


@pytest.mark.parametrize("struct", [MetadataRequest_v4, MetadataRequest_v5])
def test_the_request_never_asks_for_creation(struct: type[MetadataRequest_v5]) -> None:
    built = lookup_request(["a.dispatch.x"]).build(struct)
    assert built.allow_auto_topic_creation is False
    assert built.topics == ["a.dispatch.x"]
