"""Closing a group's hanging offset commit survives a first refusal to add the group.

A takeover closes its transactional id's transaction the broker left open
on the group's offsets (``services.kafka.hanging.close_hanging``) with one
marker-only transaction that the group's offsets join (``AddOffsetsToTxn``).
aiokafka's handler makes a single attempt and answers False when the
coordinator moved, was loading or was still completing the previous
transaction; that answer was taken as done, the group was left out, and the
offsets stayed unstable until the takeover gave up on them. Here the first
attempt is sent to a coordinator that is gone (a node id the cluster does
not have), as after a coordinator move: the next attempt finds the real one.
"""

from __future__ import annotations

import pytest
from aiokafka.client import CoordinationType
from aiokafka.structs import OffsetAndMetadata

from services.kafka.clients import (
    AIOKafkaProducer,
    KafkaError,
    NewTopic,
    TopicPartition,
    new_admin,
    new_consumer,
    new_producer,
)
from services.kafka.fencing import stable_committed
from services.kafka.hanging import close_hanging
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

GONE_NODE = 9_999
"""A node id no broker of the test cluster has."""



async def hang_offsets(kafka: KafkaSettings, txn_id: str, group: str, tp: TopicPartition) -> None:
    """A committed transaction of ``txn_id`` whose offset commit for ``group`` the transaction
    coordinator never learned of (no ``AddOffsetsToTxn``): no marker closes it."""
    producer = new_producer(kafka, "hanging-offsets", transactional_id=txn_id)
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send_and_wait(tp.topic, b"x", partition=tp.partition)
        producer._txn_manager.consumer_group_added(group)  # never AddOffsetsToTxn
        try:
            await producer.send_offsets_to_transaction({tp: OffsetAndMetadata(1, "")}, group)
        except KafkaError as exc:
            pytest.skip(f"this broker verifies transaction partitions (KIP-890): {exc}")
        await producer.commit_transaction()
    finally:
        await producer.stop()


def first_coordinator_gone(producer: AIOKafkaProducer) -> list[int]:
    """Have ``producer``'s first transaction-coordinator lookup name a node that is gone;
    returns the nodes each lookup named."""
    sender = producer._sender
    real, named = sender._find_coordinator, []

    async def find(kind: CoordinationType, key: str) -> int:
        node = GONE_NODE if not named else await real(kind, key)
        named.append(node)
        return node

    sender._find_coordinator = find
    return named


async def test_the_group_joins_the_closing_transaction_after_a_refused_first_attempt(
        kafka: KafkaSettings) -> None:
    prefix = kafka.topic_prefix
    tp = TopicPartition(f"{prefix}.in", 0)
    admin = new_admin(kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(tp.topic, 1, 1)])
    finally:
        await admin.close()
    txn_id, group = f"{prefix}.tx", f"{prefix}.g"
    await hang_offsets(kafka, txn_id, group, tp)
    member = new_consumer(kafka, "hanging-offsets-member", group_id=group)
    await member.start()
    try:
        with pytest.raises(KafkaError, match="unstable"):
            await stable_committed(member, [tp], timeout_s=3.0)

        closer = new_producer(kafka, "hanging-offsets-closer", transactional_id=txn_id)
        await closer.start()
        try:
            named = first_coordinator_gone(closer)
            await close_hanging(closer, [], commit=True, group_id=group)
        finally:
            await closer.stop()

        assert await stable_committed(member, [tp], timeout_s=30.0) == {tp: 1}
        assert named[0] == GONE_NODE, named
        assert len(named) >= 2, named
    finally:
        await member.stop()
