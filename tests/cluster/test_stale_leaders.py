"""A reader that seeks while its metadata names a former leader finds the new leader.

The cluster suite's one-fault-of-each-kind scenario once failed in CI: its
probe's reader, started while the transaction coordinator's node was
paused, cached that node as a partition's leader; when the node came back
as a follower it answered every offset lookup ``NOT_LEADER_OR_FOLLOWER``
and aiokafka asked it again and again, without refreshing its metadata,
until the five-minute periodic refresh. Every service reader seeks the same
way (restoring a store, a stream continuing from the log), so the fix is
in the clients every service builds (``services.kafka.stale_leaders``).

Here the leader is moved under a reader on purpose: the reader learns the
partition's leader through another node and never connects to the leader;
the leader is SIGKILLed, another node takes the partition, the killed node
starts again as a follower; then the reader seeks to the beginning.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cluster.probes import delete_topics
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.kafka.clients import KafkaError, TopicPartition, new_consumer, new_producer
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.cluster

RECORDS = 20
READ_LIMIT_S = 90.0
"""Far below the five minutes a reader stood still for, far above a leader lookup."""


async def test_a_seek_after_the_leader_moved_reads_from_the_new_leader(
        relay_cluster: launcher.Cluster, topic_prefix: str) -> None:
    cluster = relay_cluster
    settings = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
                             AGUI_TOPIC_PREFIX=topic_prefix, AGUI_PARTITIONS=1)
    await ensure_topics(settings, ("stale",))
    topic = settings.topics.events
    tp = TopicPartition(topic, 0)
    producer = new_producer(settings, "stale-leaders-writer")
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send_and_wait(topic, f"r{i}".encode(), key=b"thread")
    finally:
        await producer.stop()

    former = cluster.leader(topic, 0)
    assert former is not None
    through = next(i for i in range(len(cluster.nodes)) if i != former)
    via_other = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=cluster.nodes[through].bootstrap,
                              AGUI_TOPIC_PREFIX=topic_prefix, AGUI_PARTITIONS=1)
    reader = new_consumer(via_other, "stale-leaders-reader", group_id=None)
    await reader.start()
    try:
        # What ``assign`` would ask for, without reading: the topic's metadata, cached.
        assert await reader._client._wait_on_metadata(topic) == {0}
        await asyncio.to_thread(cluster.kill_node, former)
        async with asyncio.timeout(120):
            while cluster.leader(topic, 0) in (None, former):
                await asyncio.sleep(0.2)
        await asyncio.to_thread(cluster.start_node, former, 120)
        await asyncio.to_thread(cluster.wait_in_sync, 180)
        leader = cluster.leader(topic, 0)
        assert leader not in (None, former), "the killed node took the partition back"
        # The premise: the reader still believes the killed node leads the partition.
        assert reader._client.cluster.leader_for_partition(tp) == cluster.nodes[former].node_id

        reader.assign([tp])
        await reader.seek_to_beginning(tp)
        values: list[bytes] = []
        async with asyncio.timeout(READ_LIMIT_S):
            while len(values) < RECORDS:
                batch = await reader.getmany(tp, timeout_ms=500)
                values.extend(r.value or b"" for r in batch.get(tp, []))
        assert values == [f"r{i}".encode() for i in range(RECORDS)]
    finally:
        await reader.stop()
        with contextlib.suppress(KafkaError, OSError):
            await delete_topics(settings)
