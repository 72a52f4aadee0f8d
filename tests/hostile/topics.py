"""Writing poison straight onto the relay's topics, and finding what became of it.

The consumer service refuses a hostile request at the edge, but any client
with access to the cluster can write the same record onto ``requests`` (or
a dispatch topic) itself, and an older version may have left one there. So
the suite also writes them directly — ``publish`` returns where the record
landed — and then looks for the service's answer: a decision on its
requestId (``decision_for``), a dead letter naming that partition and offset
(``dead_letter``), or the run's terminal event (``run_ending``). Reads are
group-less and bounded by a deadline.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from contracts import DeadLetter, Decision, DecodeError, decode
from services.kafka.clients import TopicPartition, new_producer
from services.kafka.partitioning import partition_for
from services.kafka.reader import Start, TopicReader
from services.runtime.settings import KafkaSettings


def envelope(wire_input: dict[str, Any], agent: str = "scripted",
             principal: str | None = "tenant-a", **extra: Any) -> dict[str, Any]:
    """A RunRequest in wire form, as another client would write it."""
    doc: dict[str, Any] = {"schemaVersion": 1, "requestId": str(uuid.uuid4()), "agent": agent,
                           "input": wire_input, "submittedAt": datetime.now(UTC).isoformat(),
                           **extra}
    if principal is not None:
        doc["principal"] = principal
    return doc


async def publish(settings: KafkaSettings, topic: str, key: bytes, value: bytes | None,
                  headers: list[tuple[str, bytes]] | None = None) -> tuple[int, int]:
    """Write one record (``value`` None: a tombstone); its (partition, offset)."""
    producer = new_producer(settings, f"hostile-{uuid.uuid4().hex[:6]}")
    await producer.start()
    try:
        sent = await (await producer.send(topic, value, key=key, headers=headers))
    finally:
        await producer.stop()
    return int(sent.partition), int(sent.offset)


NOT_UTF8 = b"\xff\xfe-name"
"""A header name no UTF-8 decoder takes (``publish_not_utf8``)."""


def batch_with_a_name_not_utf8(records: list[tuple[bytes, bytes]], bad: int) -> bytes:
    """One v2 record batch of ``records`` (key, value); record ``bad`` carries a header
    whose name is ``NOT_UTF8``. aiokafka's builder takes names as text, so the batch is
    built with a placeholder of the same length, patched and its CRC recomputed: what
    a client writing raw bytes (librdkafka, say) would send."""
    placeholder = "Q" * len(NOT_UTF8)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 24)
    for i, (key, value) in enumerate(records):
        headers = [(placeholder, b"1")] if i == bad else [("x-hostile", b"1")]
        builder.append(i, timestamp=None, key=key, value=value, headers=headers)
    raw = bytearray(builder.build())
    at = raw.find(placeholder.encode())
    raw[at:at + len(NOT_UTF8)] = NOT_UTF8
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))  # the CRC covers from 21
    return bytes(raw)


async def publish_not_utf8(settings: KafkaSettings, topic: str, partition: int,
                           records: list[tuple[bytes, bytes]], bad: int) -> int:
    """Write ``batch_with_a_name_not_utf8`` onto ``topic`` ``partition`` with a produce
    request of its own; the offset of its first record."""
    producer = new_producer(settings, f"hostile-raw-{uuid.uuid4().hex[:6]}")
    await producer.start()
    try:
        await producer.client.force_metadata_update()
        node = producer.client.cluster.leader_for_partition(TopicPartition(topic, partition))
        request = ProduceRequest(transactional_id=None, required_acks=-1, timeout=10_000,
                                 topics=[(topic, [(partition, batch_with_a_name_not_utf8(
                                     records, bad))])])
        response = await producer.client.send(node, request)
    finally:
        await producer.stop()
    ((_, ((_, error, offset, *_),)),) = response.topics
    assert error == 0, f"the broker refused the batch: error {error}"
    return int(offset)


def thread_on(partition: int, partitions: int, tag: str) -> str:
    """A fresh thread id that Kafka's partitioner puts on ``partition``."""
    base = f"hx-{tag}-{uuid.uuid4().hex[:8]}"
    for i in range(100_000):
        candidate = f"{base}-{i}"
        if partition_for(candidate, partitions) == partition:
            return candidate
    raise AssertionError(f"no thread id for partition {partition}")


async def first_match(settings: KafkaSettings, topic: str, partitions: list[int],
                      wanted: Callable[[Any], bool], within_s: float) -> Any | None:
    """The first record of ``partitions`` of ``topic`` (from the beginning) that is
    ``wanted``, or None once ``within_s`` passed."""
    deadline = time.monotonic() + within_s
    async with TopicReader(settings, f"hostile-read-{uuid.uuid4().hex[:6]}") as reader:
        await reader.assign([TopicPartition(topic, p) for p in partitions], Start.beginning())
        async for batch in reader.batches(heartbeat=True):
            for record in batch:
                if wanted(record):
                    return record
            if time.monotonic() > deadline:
                return None
    return None


async def dead_letter(settings: KafkaSettings, source: str, partition: int, offset: int,
                      within_s: float = 30.0) -> DeadLetter | None:
    """The dead letter of ``source``'s record at (partition, offset), if one comes in time."""

    def letter(record: Any) -> DeadLetter | None:
        try:
            found = decode(DeadLetter, record.value or b"")
        except DecodeError:
            return None
        same = (found.source_topic, found.partition, found.offset) == (source, partition, offset)
        return found if same else None

    topic = settings.topics.deadletter
    count = settings.partitions  # the deadletter topic may have its own count: read them all
    async with TopicReader(settings, "hostile-dl") as reader:
        count = await reader.partition_count(topic)
    record = await first_match(settings, topic, list(range(count)),
                               lambda r: letter(r) is not None, within_s)
    return letter(record) if record is not None else None


async def decision_for(settings: KafkaSettings, request_id: str,
                       within_s: float) -> Decision | None:
    """The (first) decision on ``request_id``, if one comes in time."""

    def decision(record: Any) -> Decision | None:
        try:
            found = decode(Decision, record.value or b"")
        except DecodeError:
            return None
        return found if found.request_id == request_id else None

    record = await first_match(settings, settings.topics.decisions,
                               list(range(settings.partitions)),
                               lambda r: decision(r) is not None, within_s)
    return decision(record) if record is not None else None


async def answer_to(settings: KafkaSettings, request_id: str, where: tuple[int, int],
                    within_s: float) -> Decision | DeadLetter | None:
    """What became of the ``requests`` record at ``where`` (partition, offset): its
    decision, else its dead letter, else None."""
    decided = await decision_for(settings, request_id, within_s)
    if decided is not None:
        return decided
    return await dead_letter(settings, settings.topics.requests, *where, within_s=within_s)


async def run_ending(settings: KafkaSettings, thread_id: str, run_id: str,
                     within_s: float = 30.0) -> dict[str, Any] | None:
    """The terminal event of the run on ``events``, if one comes in time."""
    partition = partition_for(thread_id, settings.partitions)
    run_key = run_id.encode()

    def terminal(record: Any) -> bool:
        if record.key != thread_id.encode() or record.value is None:
            return False
        headers = dict(record.headers or ())
        if headers.get("agui-run-id") not in (None, run_key):
            return False
        try:
            event = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            return False
        return isinstance(event, dict) and event.get("type") in ("RUN_FINISHED", "RUN_ERROR") \
            and event.get("runId", run_id) == run_id

    record = await first_match(settings, settings.topics.events, [partition], terminal,
                               within_s)
    if record is None:
        return None
    event: dict[str, Any] = orjson.loads(record.value)
    return event
