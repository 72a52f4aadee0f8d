"""Group-generation fencing (KIP-447) against the real broker.

One producer may commit offsets for many input partitions only if the group
refuses a zombie's offsets and the next owner can wait out a transaction
still holding some. These tests drive ``TxnOffsetCommit`` v3 and
``OffsetFetch`` v7 (``require_stable``), which ``services.kafka.fencing``
teaches aiokafka, against the broker itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from services.kafka.clients import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    KafkaError,
    NewTopic,
    TopicPartition,
    new_admin,
    new_consumer,
    new_producer,
)
from services.kafka.fencing import (
    FencedGroup,
    Member,
    StaleGenerationError,
    fenced_group,
    stable_committed,
)
from services.kafka.transactions import OutRecord, commit_outputs
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix, partitions=2)


@pytest.fixture
async def member(kafka: KafkaSettings) -> AsyncIterator[AIOKafkaConsumer]:
    """A consumer that has joined group ``<prefix>.g`` and owns both partitions of ``in``."""
    prefix = kafka.topic_prefix
    admin = new_admin(kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}.in", 2, 1), NewTopic(f"{prefix}.out", 2, 1)])
    finally:
        await admin.close()
    consumer = new_consumer(kafka, "fencing-test", f"{prefix}.in", group_id=f"{prefix}.g")
    await consumer.start()
    try:
        while len(consumer.assignment()) < 2:
            await consumer.getmany(timeout_ms=100)
        yield consumer
    finally:
        await consumer.stop()


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[AIOKafkaProducer]:
    started = new_producer(kafka, "fencing-test", transactional_id=f"{kafka.topic_prefix}.txn")
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def source(kafka: KafkaSettings, partition: int) -> TopicPartition:
    return TopicPartition(f"{kafka.topic_prefix}.in", partition)


def output(kafka: KafkaSettings, value: bytes = b"decided") -> list[OutRecord]:
    return [OutRecord(f"{kafka.topic_prefix}.out", value, b"thread")]


async def out_topic(kafka: KafkaSettings) -> tuple[list[bytes], bool]:
    """The committed values on ``out``, and whether no transaction is open on it."""
    tps = [TopicPartition(f"{kafka.topic_prefix}.out", p) for p in range(2)]
    committed = new_consumer(kafka, "fencing-test-committed", group_id=None)
    everything = new_consumer(kafka, "fencing-test-all", group_id=None, read_committed=False)
    await committed.start()
    await everything.start()
    try:
        committed.assign(tps)
        stable, ends = await committed.end_offsets(tps), await everything.end_offsets(tps)
        await committed.seek_to_beginning(*tps)
        values: list[bytes] = []
        while any([await committed.position(tp) < stable[tp] for tp in tps]):
            for records in (await committed.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
        return values, stable == ends
    finally:
        await committed.stop()
        await everything.stop()


async def test_the_current_member_commits_offsets_for_every_partition_in_one_transaction(
    kafka: KafkaSettings, member: AIOKafkaConsumer, producer: AIOKafkaProducer
) -> None:
    both = [source(kafka, 0), source(kafka, 1)]
    assert await stable_committed(member, both) == dict.fromkeys(both)
    group = fenced_group(member)
    assert group == f"{kafka.topic_prefix}.g"
    assert group.member.generation_id >= 1
    await commit_outputs(producer, output(kafka), {both[0]: 5, both[1]: 9}, group)
    assert await stable_committed(member, both) == {both[0]: 5, both[1]: 9}


@pytest.mark.parametrize("who", ["an earlier generation", "an unknown member"])
async def test_offsets_from_a_member_the_group_moved_past_are_refused_and_nothing_commits(
    who: str, kafka: KafkaSettings, member: AIOKafkaConsumer, producer: AIOKafkaProducer
) -> None:
    tp = source(kafka, 0)
    current = fenced_group(member).member
    await commit_outputs(producer, [], {tp: 3}, fenced_group(member))
    zombie = (
        Member(current.group_id, current.member_id, current.generation_id - 1)
        if who == "an earlier generation"
        else Member(current.group_id, "departed-member", current.generation_id)
    )
    with pytest.raises(StaleGenerationError, match="the group moved on"):
        await commit_outputs(producer, output(kafka, b"zombie"), {tp: 8}, FencedGroup(zombie))
    assert await stable_committed(member, [tp]) == {tp: 3}
    assert await out_topic(kafka) == ([], True)  # aborted on the broker, not left open
    # the producer goes on: the current member still commits with it, and only its records
    await commit_outputs(producer, output(kafka), {tp: 4}, fenced_group(member))
    assert await stable_committed(member, [tp]) == {tp: 4}
    assert await out_topic(kafka) == ([b"decided"], True)


async def test_a_stable_fetch_waits_for_the_open_transaction_holding_the_offsets(
    kafka: KafkaSettings, member: AIOKafkaConsumer, producer: AIOKafkaProducer
) -> None:
    tp = source(kafka, 1)
    await commit_outputs(producer, [], {tp: 2}, fenced_group(member))
    await producer.begin_transaction()
    await producer.send_offsets_to_transaction({tp: 6}, fenced_group(member))
    with pytest.raises(KafkaError, match="unstable after"):
        await stable_committed(member, [tp], timeout_s=0.5)
    waiting = asyncio.create_task(stable_committed(member, [tp]))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await producer.commit_transaction()
    assert await asyncio.wait_for(waiting, 30) == {tp: 6}
