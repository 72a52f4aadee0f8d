"""What agui-relay relies on from Apache Kafka 4.x through aiokafka 0.14, proven live.

aiokafka's own CI stops at Kafka 2.8 and speaks only the v0 transaction APIs,
so every broker feature the relay uses is exercised here against the real
broker: topic configs, idempotent produce, exactly-once consume-transform-
produce with offsets in the transaction, zombie fencing, SASL/SCRAM, and
upstream bug #1098.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError, ProducerFenced, SaslAuthenticationFailed

from deploy.kafka import launcher
from services.kafka.admin import _await_leaders, describe_catalog, ensure_topics
from services.runtime.settings import KafkaSettings

if TYPE_CHECKING:
    from conftest import SaslEndpoint

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 20.0


# --------------------------------------------------------------------------- helpers


@asynccontextmanager
async def admin_client(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def create_topics(bootstrap: str, *topics: NewTopic) -> None:
    """Create ``topics`` and wait until the broker's metadata has their leaders.

    CreateTopics answers once the controller has the topic; the broker's own
    metadata follows a moment later (longer the more topics it has), and a
    DescribeConfigs sent in between is refused with UnknownTopicOrPartition.
    """
    async with admin_client(bootstrap) as admin:
        response = await admin.create_topics(list(topics))
        failed = {name: code for name, code, *_ in response.topic_errors if code != 0}
        assert not failed, f"CreateTopics errors: {failed}"
        names = [t.name for t in topics]
        async with asyncio.timeout(READ_TIMEOUT_S):
            while not all(d.get("error_code", 0) == 0 and d["partitions"]
                          and all(p["leader"] >= 0 for p in d["partitions"])
                          for d in await admin.describe_topics(names)):
                await asyncio.sleep(0.05)


async def produce(bootstrap: str, topic: str, values: Sequence[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        for value in values:
            await producer.send(topic, value)
        await producer.flush()
    finally:
        await producer.stop()


async def read_all(
    bootstrap: str, topic: str, *, partitions: int = 1, isolation_level: str = "read_committed"
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every visible record of ``topic`` up to its current end (LSO for read_committed)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation_level, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        records: list[ConsumerRecord[bytes, bytes]] = []
        async with asyncio.timeout(READ_TIMEOUT_S):
            while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
                batches = await consumer.getmany(*tps, timeout_ms=500)
                for batch in batches.values():
                    records.extend(batch)
        return records
    finally:
        await consumer.stop()


async def take(consumer: AIOKafkaConsumer, n: int) -> list[ConsumerRecord[bytes, bytes]]:
    """Exactly ``n`` records from a subscribed consumer (fails after READ_TIMEOUT_S)."""
    records: list[ConsumerRecord[bytes, bytes]] = []
    async with asyncio.timeout(READ_TIMEOUT_S):
        while len(records) < n:
            batches = await consumer.getmany(timeout_ms=500, max_records=n - len(records))
            for batch in batches.values():
                records.extend(batch)
    return records


def group_consumer(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    """The exactly-once input side: read_committed, no auto commit."""
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )


# --------------------------------------------------------------------------- tests


async def test_broker_serves_the_v0_apis_aiokafka_uses(kafka_bootstrap: str) -> None:
    host, _, port = kafka_bootstrap.rpartition(":")
    versions = launcher.api_versions(host, int(port))
    # InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
    for api_key in (22, 24, 25, 26, 28):
        assert versions[api_key][0] == 0, f"api {api_key} no longer serves v0: {versions[api_key]}"


async def test_the_launchers_metadata_probe_reads_what_aiokafka_reads(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    """``probe.metadata`` (the cluster's readiness and in-sync checks) agrees with aiokafka."""
    topic = f"{topic_prefix}.probe"
    await create_topics(kafka_bootstrap, NewTopic(topic, 2, 1))
    async with admin_client(kafka_bootstrap) as admin:
        cluster = await admin.describe_cluster()
        (described,) = await admin.describe_topics([topic])
    host, _, port = kafka_bootstrap.rpartition(":")
    meta = launcher.metadata(host, int(port))
    assert sorted(meta.brokers) == sorted(b["node_id"] for b in cluster["brokers"])
    assert meta.controller == cluster["controller_id"]
    ours = sorted((p.partition, p.leader, p.replicas, p.isr)
                  for p in meta.partitions if p.topic == topic)
    assert ours == sorted((p["partition"], p["leader"], tuple(p["replicas"]), tuple(p["isr"]))
                          for p in described["partitions"])
    assert not [p for p in meta.partitions if p.topic == topic and p in meta.under_replicated()]


async def test_catalog_topics_on_one_broker_get_one_replica(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    """``ensure_topics`` reads the cluster: one broker, one replica, the broker's min ISR."""
    settings = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
                             AGUI_TOPIC_PREFIX=topic_prefix, AGUI_PARTITIONS=2)
    await ensure_topics(settings, ("approval",))
    states = await describe_catalog(settings, ("approval",))
    assert {s.replicas for s in states} == {1}
    assert {s.configs.get("min.insync.replicas") for s in states} == {"1"}


async def test_new_catalog_topics_answer_their_first_reader_at_once(
    kafka_bootstrap: str, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Once ``ensure_topics`` returns, every partition's leader serves it: a reader's first
    ListOffsets (``seek_to_end``) is answered, not refused NotLeaderForPartition and retried
    with an error logged (which a broker's metadata allows for a moment after creation)."""
    settings = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
                             AGUI_TOPIC_PREFIX=topic_prefix, AGUI_PARTITIONS=8)
    await ensure_topics(settings, ("approval",))
    specs = settings.topics.specs(("approval",))
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="aiokafka"):
            partitions = [TopicPartition(s.name, p) for s in specs for p in range(s.partitions)]
            consumer.assign(partitions)
            await consumer.seek_to_end(*partitions)
            assert {await consumer.position(tp) for tp in partitions} == {0}
    finally:
        await consumer.stop()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("aiokafka")] == []


async def test_topics_not_served_in_time_are_named_in_a_warning(
    kafka_bootstrap: str, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``ensure_topics`` waits a bounded time for new topics' leaders; when they are
    still not served, it says which (it returned silently: a reader's later "not found
    in cluster metadata" was the first sign, seen once on a busy CI machine)."""
    async with admin_client(kafka_bootstrap) as admin:
        with caplog.at_level(logging.WARNING, logger="services.kafka.admin"):
            await _await_leaders(admin, [f"{topic_prefix}.never-created"], within_s=1.0)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "services.kafka.admin"]
    assert f"not served yet ({topic_prefix}.never-created)" in warning


async def test_create_compacted_topic_with_configs(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.state"
    configs = {"cleanup.policy": "compact", "retention.ms": "604800000", "segment.bytes": "1048576"}
    await create_topics(kafka_bootstrap, NewTopic(topic, 3, 1, topic_configs=configs))

    async with admin_client(kafka_bootstrap) as admin:
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        (meta,) = await admin.describe_topics([topic])
    (resource,) = [r for response in described for r in response.resources]
    error_code, _, _, name, entries = resource[:5]
    assert (error_code, name) == (0, topic)
    actual = {entry[0]: entry[1] for entry in entries}
    assert {key: actual[key] for key in configs} == configs
    assert len(meta["partitions"]) == 3


async def test_idempotent_produce_reads_back_in_order(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.events"
    await create_topics(kafka_bootstrap, NewTopic(topic, 3, 1))
    keys = [f"run-{i}".encode() for i in range(5)]
    sent = [(keys[i % 5], f"{i:04d}".encode()) for i in range(300)]

    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, enable_idempotence=True, acks="all", linger_ms=5
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in sent]
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()

    records = await read_all(kafka_bootstrap, topic, partitions=3)
    assert sorted((r.key, r.value) for r in records) == sorted(sent), "lost or duplicated"
    for key in keys:
        assert [r.value for r in records if r.key == key] == [v for k, v in sent if k == key]
    per_partition: dict[int, list[int]] = {}
    for md in metadata:
        per_partition.setdefault(md.partition, []).append(md.offset)
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets))), "idempotent offsets are gap-free"


async def test_transactional_consume_transform_produce(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    source, sink, group = f"{topic_prefix}.in", f"{topic_prefix}.out", f"{topic_prefix}.g"
    await create_topics(kafka_bootstrap, NewTopic(source, 1, 1), NewTopic(sink, 1, 1))
    await produce(kafka_bootstrap, source, [f"m{i}".encode() for i in range(6)])
    tp = TopicPartition(source, 0)

    consumer = group_consumer(kafka_bootstrap, source, group)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{group}.tx")
    await consumer.start()
    await producer.start()
    try:
        batch = await take(consumer, 3)
        for outcome in ("abort", "commit"):
            await producer.begin_transaction()
            for record in batch:
                await producer.send(sink, record.value.upper())
            await producer.send_offsets_to_transaction({tp: batch[-1].offset + 1}, group)
            if outcome == "abort":
                await producer.abort_transaction()
                consumer.seek(tp, batch[0].offset)  # rewind: the aborted work is redone
                assert [r.offset for r in await take(consumer, 3)] == [0, 1, 2]
            else:
                await producer.commit_transaction()
    finally:
        await producer.stop()
        await consumer.stop()

    committed = await read_all(kafka_bootstrap, sink)
    assert [r.value for r in committed] == [b"M0", b"M1", b"M2"], "exactly once, aborts invisible"
    uncommitted = await read_all(kafka_bootstrap, sink, isolation_level="read_uncommitted")
    assert [r.value for r in uncommitted] == [b"M0", b"M1", b"M2"] * 2, "the abort did write"

    async with admin_client(kafka_bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert offsets[tp].offset == 3
    resumed = group_consumer(kafka_bootstrap, source, group)
    await resumed.start()
    try:
        assert [r.value for r in await take(resumed, 3)] == [b"m3", b"m4", b"m5"]
    finally:
        await resumed.stop()


async def test_repeated_send_offsets_in_one_transaction_issue_1098(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    """aio-libs/aiokafka#1098: KeyError in TxnOffsetCommitHandler on repeated commits."""
    source, sink, group = f"{topic_prefix}.in", f"{topic_prefix}.out", f"{topic_prefix}.g"
    await create_topics(kafka_bootstrap, NewTopic(source, 2, 1), NewTopic(sink, 1, 1))
    tp0, tp1 = TopicPartition(source, 0), TopicPartition(source, 1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{group}.tx")
    await producer.start()
    try:
        async with producer.transaction():  # one by one, awaited
            for i in range(1, 21):
                await producer.send(sink, b"%d" % i)
                await producer.send_offsets_to_transaction({tp0: i, tp1: 2 * i}, group)
        async with producer.transaction():  # many in flight at once, same partitions
            pending = []
            for i in range(21, 41):
                pending.append(await producer.send(sink, b"%d" % i))
                pending.append(producer.send_offsets_to_transaction({tp0: i, tp1: 2 * i}, group))
            await asyncio.gather(*pending)
        async with producer.transaction():  # the producer is still healthy afterwards
            await producer.send(sink, b"after")
    finally:
        await producer.stop()

    async with admin_client(kafka_bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert (offsets[tp0].offset, offsets[tp1].offset) == (40, 80)
    assert len(await read_all(kafka_bootstrap, sink)) == 41


async def test_same_transactional_id_fences_the_zombie(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    """Pre-KIP-447 fencing (TxnOffsetCommit v0): a successor's init aborts the zombie."""
    sink, txn_id = f"{topic_prefix}.out", f"{topic_prefix}.tx"
    await create_topics(kafka_bootstrap, NewTopic(sink, 1, 1))
    zombie = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=txn_id)
    successor = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=txn_id)
    await zombie.start()
    try:
        await zombie.begin_transaction()
        await zombie.send_and_wait(sink, b"zombie")
        await successor.start()
        with pytest.raises(ProducerFenced):
            await zombie.commit_transaction()
        async with successor.transaction():
            await successor.send(sink, b"successor")
    finally:
        await zombie.stop()
        await successor.stop()
    assert [r.value for r in await read_all(kafka_bootstrap, sink)] == [b"successor"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_accepts_right_and_refuses_wrong_password(
    kafka_sasl: SaslEndpoint, mechanism: str
) -> None:
    host, _, port = kafka_sasl.bootstrap.rpartition(":")
    credentials = {"sasl_mechanism": mechanism, "sasl_plain_username": kafka_sasl.username}

    conn = await create_conn(
        host,
        int(port),
        security_protocol="SASL_PLAINTEXT",
        sasl_plain_password=kafka_sasl.password,
        **credentials,
    )
    assert conn.connected()
    conn.close()

    with pytest.raises(SaslAuthenticationFailed):
        await create_conn(
            host,
            int(port),
            security_protocol="SASL_PLAINTEXT",
            sasl_plain_password=f"not-{kafka_sasl.password}",
            **credentials,
        )


async def test_scram_client_round_trip_and_refusal(
    kafka_sasl: SaslEndpoint,
    kafka_bootstrap: str,
    topic_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = f"{topic_prefix}.secure"
    await create_topics(kafka_bootstrap, NewTopic(topic, 1, 1))
    auth = {
        "bootstrap_servers": kafka_sasl.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": kafka_sasl.username,
    }
    producer = AIOKafkaProducer(**auth, sasl_plain_password=kafka_sasl.password, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"over-scram")
    finally:
        await producer.stop()
    assert [r.value for r in await read_all(kafka_bootstrap, topic)] == [b"over-scram"]

    intruder = AIOKafkaProducer(**auth, sasl_plain_password="wrong", acks="all")
    with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(KafkaConnectionError):
        await intruder.start()
    await intruder.stop()
    assert "SaslAuthenticationFailed" in caplog.text
