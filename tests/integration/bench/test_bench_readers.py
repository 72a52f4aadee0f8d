"""The throughput benchmark's two floors read exactly the window they are given.

``bench.consumer_throughput`` divides the events each plain reader read by
its time: a reader that stopped early, or read past the window's end, would
make the floor (and so the ratio) wrong without a sign. Both readers, the
one on the services' runtime and the bare one on aiokafka's defaults, run
here as the benchmark runs them, in their own processes, on a window with
records before and after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.consumer_throughput import READ_ROUNDS, end_offsets, plain_reads
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_producer, partition_fetch_bytes
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

PARTITIONS = 8  # what bench.consumer_throughput reads


async def write(kafka: KafkaSettings, topic: str, count: int) -> None:
    producer = new_producer(kafka, "readers-test")
    await producer.start()
    try:
        for n in range(count):
            await producer.send(topic, b"{}", key=f"t-{n % 13}".encode())
        await producer.flush()
    finally:
        await producer.stop()


@pytest.mark.parametrize("reader", ["plain", "bare"])
async def test_a_plain_reader_reads_the_window_and_nothing_else(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, reader: str) -> None:
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                          partitions=PARTITIONS)
    await ensure_topics(kafka, ())
    topics = (kafka.topics.events, kafka.topics.decisions)
    await write(kafka, kafka.topics.events, 40)
    start = await end_offsets(kafka, topics)
    await write(kafka, kafka.topics.events, 700)
    await write(kafka, kafka.topics.decisions, 30)
    end = await end_offsets(kafka, topics)
    await write(kafka, kafka.topics.events, 60)
    spec = {"bootstrap": kafka_bootstrap, "prefix": topic_prefix, "start": start, "end": end,
            "events_topic": kafka.topics.events,
            "max_partition_fetch_bytes": partition_fetch_bytes(kafka)}

    read = await plain_reads(spec, None, tmp_path, reader)

    assert "error" not in read, (tmp_path / f"{reader}-reader.log").read_text()
    assert read["events"] == 700
    assert read["records"] == 730
    assert len(read["rounds_events_per_s"]) == READ_ROUNDS
