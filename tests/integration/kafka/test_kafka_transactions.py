"""``commit_outputs`` against the real broker: a transaction is all of its records, or none.

aiokafka, unlike the Java client, still commits a transaction when one of its
record batches was refused: a failed batch does not make the transaction
abortable, ``commit_transaction`` succeeds, and the records the broker took
commit together with the consumed offsets. ``commit_outputs`` must notice the
refusal and abort instead, or a consume → produce loop moves its offsets past
input whose outputs are half written.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from services.kafka.clients import (
    AIOKafkaProducer,
    KafkaError,
    NewTopic,
    TopicPartition,
    new_admin,
    new_consumer,
    new_producer,
)
from services.kafka.transactions import (
    OutRecord,
    RecordsRefusedError,
    TransactionStalledError,
    commit_outputs,
    stop_producer,
)
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

SMALL_TOPIC_MAX_BYTES = 1024



@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[AIOKafkaProducer]:
    prefix = kafka.topic_prefix
    admin = new_admin(kafka)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(f"{prefix}.in", 1, 1),
                NewTopic(f"{prefix}.out", 1, 1),
                NewTopic(
                    f"{prefix}.small",
                    1,
                    1,
                    topic_configs={"max.message.bytes": str(SMALL_TOPIC_MAX_BYTES)},
                ),
            ]
        )
    finally:
        await admin.close()
    started = new_producer(kafka, "txn-test", transactional_id=f"{prefix}.txn")
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


async def committed_view(kafka: KafkaSettings, group: str) -> tuple[list[bytes], int | None]:
    """What a read_committed reader sees on ``out``, and the group's offset of ``in``."""
    prefix = kafka.topic_prefix
    out = TopicPartition(f"{prefix}.out", 0)
    source = TopicPartition(f"{prefix}.in", 0)
    consumer = new_consumer(kafka, "txn-test-reader", group_id=group)
    await consumer.start()
    try:
        offset = await consumer.committed(source)
        consumer.assign([out])
        end = (await consumer.end_offsets([out]))[out]
        await consumer.seek_to_beginning(out)
        values: list[bytes] = []
        while await consumer.position(out) < end:
            got = await consumer.getmany(out, timeout_ms=1000)
            values.extend(r.value for r in got.get(out, []) if r.value is not None)
    finally:
        await consumer.stop()
    return values, offset


async def test_a_record_the_broker_refuses_aborts_the_whole_transaction(
    kafka: KafkaSettings, producer: AIOKafkaProducer
) -> None:
    prefix, group = kafka.topic_prefix, f"{kafka.topic_prefix}.group"
    source = TopicPartition(f"{prefix}.in", 0)
    refused = OutRecord(f"{prefix}.small", b"x" * (4 * SMALL_TOPIC_MAX_BYTES))
    with pytest.raises(KafkaError):
        await commit_outputs(
            producer, [OutRecord(f"{prefix}.out", b"half"), refused], {source: 5}, group
        )
    assert await committed_view(kafka, group) == ([], None)
    # the producer is usable again: the next transaction commits, alone
    await commit_outputs(producer, [OutRecord(f"{prefix}.out", b"whole")], {source: 7}, group)
    assert await committed_view(kafka, group) == ([b"whole"], 7)


async def test_a_refusal_for_size_names_the_refused_records_and_their_sources(
    kafka: KafkaSettings, producer: AIOKafkaProducer
) -> None:
    """The caller learns which inputs made records no retry can write (and nothing commits)."""
    prefix, group = kafka.topic_prefix, f"{kafka.topic_prefix}.group"
    source = TopicPartition(f"{prefix}.in", 0)
    fine = [OutRecord(f"{prefix}.out", b"fine", source=("in", 0, n)) for n in range(3)]
    big = OutRecord(f"{prefix}.small", b"x" * (4 * SMALL_TOPIC_MAX_BYTES), source=("in", 0, 9))
    with pytest.raises(RecordsRefusedError) as refused:
        await commit_outputs(producer, [fine[0], big, *fine[1:]], {source: 5}, group)
    assert refused.value.records == (big,)
    assert "MessageSizeTooLarge" in str(refused.value)
    assert await committed_view(kafka, group) == ([], None)


async def test_a_transaction_that_hangs_fails_at_its_deadline_and_the_next_producer_ends_it(
    kafka: KafkaSettings, producer: AIOKafkaProducer
) -> None:
    """A commit the broker never answers (its request is never sent here) cannot hang forever."""
    prefix, group = kafka.topic_prefix, f"{kafka.topic_prefix}.group"
    source = TopicPartition(f"{prefix}.in", 0)

    async def never_answered() -> None:
        await asyncio.Event().wait()

    producer.commit_transaction = never_answered  # type: ignore[method-assign]
    # the deadline covers the whole transaction: 1 s was once spent before the commit, on
    # the new topic's first write, with the other test worker's cluster busy beside it
    with pytest.raises(TransactionStalledError, match=r"within 5 s \(stuck committing\)"):
        await commit_outputs(producer, [OutRecord(f"{prefix}.out", b"stuck")], {source: 3}, group,
                             deadline_s=5.0)
    await stop_producer(producer, timeout_s=2.0)
    successor = new_producer(kafka, "txn-test", transactional_id=f"{prefix}.txn")
    await successor.start()  # init_transactions aborts what the stuck producer left open
    try:
        assert await committed_view(kafka, group) == ([], None)
        await commit_outputs(successor, [OutRecord(f"{prefix}.out", b"next")], {source: 4}, group,
                             deadline_s=10.0)
        assert await committed_view(kafka, group) == ([b"next"], 4)
    finally:
        await successor.stop()


async def test_keyed_records_land_where_a_plain_send_puts_them_in_order(
    kafka: KafkaSettings, producer: AIOKafkaProducer
) -> None:
    """The batched writes choose partitions as ``send`` does, and keep order past a full batch."""
    prefix, group = kafka.topic_prefix, f"{kafka.topic_prefix}.group"
    admin = new_admin(kafka)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(f"{prefix}.wide", 6, 1), NewTopic(f"{prefix}.plain", 6, 1)]
        )
    finally:
        await admin.close()
    # 40 keys x 5 records of 2 KiB: more than one 64 KiB batch for some partitions
    records = [
        OutRecord(f"{prefix}.wide", f"{n:03d}".encode() + b"." * 2048, f"key-{n % 40}".encode())
        for n in range(200)
    ]
    await commit_outputs(producer, records, {TopicPartition(f"{prefix}.in", 0): 1}, group)
    plain = new_producer(kafka, "txn-test-plain")
    await plain.start()
    try:
        for r in records[:40]:
            await plain.send_and_wait(f"{prefix}.plain", b"", key=r.key)
    finally:
        await plain.stop()

    async def placed(topic: str) -> dict[bytes, list[int]]:
        consumer = new_consumer(kafka, "txn-test-placed")
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(6)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            await consumer.seek_to_beginning(*tps)
            seen: dict[bytes, list[int]] = {}
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for tp, got in (await consumer.getmany(timeout_ms=1000)).items():
                    for r in got:
                        seen.setdefault(r.key, []).append(tp.partition)
                        if r.value:
                            seen.setdefault(b"order:" + r.key, []).append(int(r.value[:3]))
        finally:
            await consumer.stop()
        return seen

    wide, reference = await placed(f"{prefix}.wide"), await placed(f"{prefix}.plain")
    for n in range(40):
        key = f"key-{n}".encode()
        assert set(wide[key]) == set(reference[key])
        assert len(set(wide[key])) == 1
        assert wide[b"order:" + key] == [n, n + 40, n + 80, n + 120, n + 160]
