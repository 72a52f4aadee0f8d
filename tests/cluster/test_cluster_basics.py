"""A three-node cluster does what the relay's guarantees on a cluster rest on.

On three combined broker+controller nodes started by the launcher: the
catalog's topics are created with 3 replicas and ``min.insync.replicas=2``
(``ensure_topics`` reads the cluster), a transaction commits, the leader of
the partition being written is SIGKILLed in the middle of a transaction and
the transaction still commits with ``acks=all`` on the two nodes left, plain
idempotent writes go on, a ``read_committed`` reader sees every record once,
the killed node comes back and every partition is fully in sync again, and
stopping the cluster stops every JVM.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Callable, Iterable

import pytest

from deploy.kafka import launcher
from services.kafka.admin import TopicState, describe_catalog, ensure_topics
from services.kafka.clients import (
    AIOKafkaProducer,
    ConsumerRecord,
    TopicPartition,
    new_consumer,
    new_producer,
)
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.cluster

AGENTS = ("approval",)
PARTITIONS = 3
READ_TIMEOUT_S = 60.0


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def send_all(producer: AIOKafkaProducer, topic: str, values: Iterable[str]) -> None:
    """Send each value (keys spread over the partitions) and wait for every acknowledgement."""
    sent = [await producer.send(topic, v.encode(), key=f"k{i % 7}".encode())
            for i, v in enumerate(values)]
    await asyncio.gather(*sent)


async def read_committed(settings: KafkaSettings, topic: str) -> list[str]:
    """Every committed value of ``topic`` up to its last stable offset."""
    consumer = new_consumer(settings, "cluster-basics-reader")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        records: list[ConsumerRecord[bytes, bytes]] = []
        async with asyncio.timeout(READ_TIMEOUT_S):
            while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
                batch = await consumer.getmany(*tps, timeout_ms=500)
                records.extend(r for rs in batch.values() for r in rs)
    finally:
        await consumer.stop()
    return [r.value.decode() for r in records if r.value is not None]


async def eventually(check: Callable[[], bool], within_s: float = 20.0) -> None:
    """Wait until ``check()`` holds (metadata reaches every node a moment apart)."""
    async with asyncio.timeout(within_s):
        while not await asyncio.to_thread(check):
            await asyncio.sleep(0.2)


async def described(settings: KafkaSettings, within_s: float = 20.0) -> list[TopicState]:
    """The catalog as soon as the answering node knows every topic.

    Creation waits for leaders on one node; the node a fresh admin client
    asks may learn of the topics from the controller a moment later, and
    until then reports them missing.
    """
    async with asyncio.timeout(within_s):
        while True:
            states = await describe_catalog(settings, AGENTS)
            if all(s.exists and s.replicas for s in states):
                return states
            await asyncio.sleep(0.2)


def phase(name: str, n: int) -> list[str]:
    return [f"{name}-{i}" for i in range(n)]


async def test_three_nodes_replicate_and_a_killed_leader_loses_nothing(
    three_nodes: launcher.Cluster, topic_prefix: str
) -> None:
    cluster = three_nodes
    settings = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
                             AGUI_TOPIC_PREFIX=topic_prefix, AGUI_PARTITIONS=PARTITIONS)
    assert len(cluster.metadata().brokers) == 3

    reports = await ensure_topics(settings, AGENTS)
    assert reports
    assert all(r.created for r in reports)
    states = await described(settings)
    assert {s.spec.name: s.replicas for s in states} == {s.spec.name: 3 for s in states}
    assert {s.configs.get("min.insync.replicas") for s in states} == {"2"}
    ours = [p for p in cluster.metadata().partitions if p.topic.startswith(topic_prefix)]
    assert ours
    assert all(len(p.isr) == 3 and p.leader > 0 for p in ours)

    topic = settings.topics.events
    producer = new_producer(settings, "cluster-basics", transactional_id=f"{topic_prefix}.tx")
    plain = new_producer(settings, "cluster-basics-plain")
    await producer.start()
    await plain.start()
    try:
        async with producer.transaction():
            await send_all(producer, topic, phase("before", 30))

        victim = cluster.leader(topic, 0)
        assert victim is not None
        victim_pid = cluster.pid(victim)
        assert victim_pid is not None
        async with producer.transaction():
            await send_all(producer, topic, phase("txn-a", 15))
            await asyncio.to_thread(cluster.kill_node, victim)
            assert _gone(victim_pid)
            await send_all(producer, topic, phase("txn-b", 15))
        await send_all(plain, topic, phase("plain", 20))
        assert cluster.leader(topic, 0) not in (None, victim)
        await eventually(lambda: all(
            victim + 1 not in p.isr and len(p.isr) == 2
            for p in cluster.metadata().partitions if p.topic == topic))
        during = Counter(await read_committed(settings, topic))

        await asyncio.to_thread(cluster.start_node, victim, 120)
        await asyncio.to_thread(cluster.wait_in_sync, 120)
        async with producer.transaction():
            await send_all(producer, topic, phase("after", 30))
    finally:
        await producer.stop()
        await plain.stop()

    expected = [*phase("before", 30), *phase("txn-a", 15), *phase("txn-b", 15),
                *phase("plain", 20)]
    assert during == Counter(expected)
    # a commit returns before its markers are on every partition: the last stable offset
    # can trail it a moment, so the last transaction is read until it is all there
    final = Counter([*expected, *phase("after", 30)])
    got: Counter[str] = Counter()
    async with asyncio.timeout(READ_TIMEOUT_S):
        while (got := Counter(await read_committed(settings, topic))) != final:
            if got - final:  # more than was written, or a duplicate: no wait mends that
                break
            await asyncio.sleep(0.5)
    assert got == final
    back = [p for p in cluster.metadata().partitions if p.topic.startswith(topic_prefix)]
    assert all(len(p.isr) == 3 for p in back)

    pids = [cluster.pid(i) for i in range(3)]
    assert all(pid is not None for pid in pids)
    assert cluster.stop()
    assert all(_gone(pid) for pid in pids if pid is not None)
    assert [cluster.state(i) for i in range(3)] == ["stopped"] * 3
