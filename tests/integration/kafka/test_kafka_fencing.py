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
    InstanceFencedError,
    Member,
    StaleGenerationError,
    fenced_group,
    leave_group,
    stable_committed,
)
from services.kafka.groups import membership
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
    await new_topics(kafka)
    consumer = new_consumer(kafka, "fencing-test", f"{prefix}.in", group_id=f"{prefix}.g")
    await consumer.start()
    try:
        while len(consumer.assignment()) < 2:
            await consumer.getmany(timeout_ms=100)
        yield consumer
    finally:
        await consumer.stop()


async def new_topics(kafka: KafkaSettings) -> None:
    """``in`` and ``out``, two partitions each."""
    prefix = kafka.topic_prefix
    admin = new_admin(kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}.in", 2, 1), NewTopic(f"{prefix}.out", 2, 1)])
    finally:
        await admin.close()


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


# -- static membership (KIP-345) ----------------------------------------------

SESSION_MS = 60_000
"""Long enough that nothing below can be explained by a session timing out."""


async def static_member(kafka: KafkaSettings, instance: str) -> AIOKafkaConsumer:
    """A consumer of ``in`` that has joined ``<prefix>.g`` as group instance ``instance``."""
    consumer = new_consumer(kafka, "fencing-test", f"{kafka.topic_prefix}.in",
                            group_id=f"{kafka.topic_prefix}.g", group_instance_id=instance,
                            session_timeout_ms=SESSION_MS)
    await consumer.start()
    while len(consumer.assignment()) < 2:
        await consumer.getmany(timeout_ms=100)
    return consumer


async def group_members(kafka: KafkaSettings) -> tuple[str, int]:
    return await membership(kafka, f"{kafka.topic_prefix}.g")


async def test_a_static_member_replaced_by_a_new_process_has_its_offsets_refused_as_fenced(
    kafka: KafkaSettings, producer: AIOKafkaProducer
) -> None:
    await new_topics(kafka)
    first = await static_member(kafka, "gatekeeper-0")
    old = fenced_group(first)
    second = await static_member(kafka, "gatekeeper-0")  # the restart, its predecessor alive
    try:
        new = fenced_group(second)
        # took the place at once: same generation, no rebalance, only the member id is new
        assert (new.member.generation_id, new.member.group_instance_id) == (
            old.member.generation_id, "gatekeeper-0")
        assert new.member.member_id != old.member.member_id
        tp = source(kafka, 0)
        with pytest.raises(InstanceFencedError, match="joined it as group instance 'gatekeeper-0'"):
            await commit_outputs(producer, output(kafka, b"zombie"), {tp: 8}, old)
        await commit_outputs(producer, output(kafka), {tp: 4}, new)
        assert await stable_committed(second, [tp]) == {tp: 4}
        assert await out_topic(kafka) == ([b"decided"], True)
        # the replaced process leaving does not take its successor out of the group
        assert not await leave_group(first)
        assert await group_members(kafka) == ("Stable", 1)
    finally:
        await first.stop()
        await second.stop()


async def test_a_static_member_that_leaves_frees_its_partitions_without_waiting_out_its_session(
    kafka: KafkaSettings,
) -> None:
    await new_topics(kafka)
    member = await static_member(kafka, "gatekeeper-0")
    assert await group_members(kafka) == ("Stable", 1)
    assert await leave_group(member)
    await member.stop()
    # aiokafka's own stop sends no LeaveGroup for a static member: without ours the
    # member would stay for its 60 s session, holding the partitions
    assert await group_members(kafka) == ("Empty", 0)


async def test_leave_group_is_a_no_op_for_a_dynamic_member(member: AIOKafkaConsumer) -> None:
    assert not await leave_group(member)
