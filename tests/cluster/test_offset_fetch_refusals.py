"""A committed-offset lookup sent to a node that is not the group's coordinator is refused,
and read as refused: never as "nothing committed".

A coordinator moves when its node restarts; a client that asks the former
one (its lookup raced the move) gets OffsetFetch's group-wide
``NOT_COORDINATOR``, which aiokafka read as an empty answer: a producer
worker's member started its partitions over from the earliest offset, the
notifier skipped every notification not yet sent
(``services.kafka.offset_fetch_refusals``). Here the race is set up
directly: the client is pointed at a node of the three that is not the
group's coordinator.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiokafka.errors import NotCoordinatorForGroupError
from aiokafka.structs import OffsetAndMetadata

from cluster.probes import delete_topics
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.kafka.clients import (
    AIOKafkaConsumer,
    KafkaError,
    TopicPartition,
    new_admin,
    new_consumer,
)
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.cluster

COMMITTED = 7


@dataclass
class Committed:
    """A group that committed ``COMMITTED`` for ``tp``, and the member that did."""

    settings: KafkaSettings
    tp: TopicPartition
    group: str
    member: AIOKafkaConsumer


@pytest.fixture
async def committed(relay_cluster: launcher.Cluster,
                    topic_prefix: str) -> AsyncIterator[Committed]:
    settings = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=relay_cluster.bootstrap,
                             AGUI_TOPIC_PREFIX=topic_prefix, AGUI_PARTITIONS=1)
    await ensure_topics(settings)
    tp = TopicPartition(settings.topics.requests, 0)
    group = f"{topic_prefix}.member"
    member = new_consumer(settings, "offset-fetch-member", group_id=group)
    await member.start()
    try:
        member.assign([tp])
        await member.commit({tp: OffsetAndMetadata(COMMITTED, "")})
        yield Committed(settings, tp, group, member)
    finally:
        await member.stop()
        with contextlib.suppress(KafkaError, OSError):
            await delete_topics(settings)


def other_node(cluster: launcher.Cluster, node_id: int) -> int:
    """A node id of the cluster other than ``node_id``."""
    return next(n.node_id for n in cluster.nodes if n.node_id != node_id)


async def test_a_member_asking_another_node_finds_the_coordinator_and_its_offsets(
        relay_cluster: launcher.Cluster, committed: Committed) -> None:
    member, tp = committed.member, committed.tp
    assert await member.committed(tp) == COMMITTED
    coordinator = member._coordinator.coordinator_id
    assert coordinator is not None
    member._coordinator.coordinator_id = other_node(relay_cluster, coordinator)

    assert await member.committed(tp) == COMMITTED
    assert member._coordinator.coordinator_id == coordinator


async def test_an_admin_asking_another_node_is_refused_not_told_nothing_is_committed(
        relay_cluster: launcher.Cluster, committed: Committed) -> None:
    group, tp = committed.group, committed.tp
    admin = new_admin(committed.settings, "offset-fetch-admin")
    await admin.start()
    try:
        coordinator = await admin.find_coordinator(group)
        found = await admin.list_consumer_group_offsets(group, partitions=[tp])
        assert {t: m.offset for t, m in found.items()} == {tp: COMMITTED}

        with pytest.raises(NotCoordinatorForGroupError):
            await admin.list_consumer_group_offsets(
                group, group_coordinator_id=other_node(relay_cluster, coordinator),
                partitions=[tp])
    finally:
        await admin.close()
