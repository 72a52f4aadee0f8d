"""The operator commands' Kafka I/O: read one thread, publish one record, run a command.

Kept apart from the pure helpers so each command module is a short script:
``read_thread`` gathers what the topics say about one thread (its live
state, its events, its decisions — each from the single partition the
thread's key maps to), ``read_state`` just the state, ``publish`` writes one
keyed record idempotently, and ``run_command`` runs a command's async body
until it returns or Ctrl-C sets its stop event, turning the errors an
operator can meet (no broker, missing topics) into one line and exit code 2.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from rich.console import Console

from contracts import ThreadState
from services.cli.ops.records import OpsRecord, drop_duplicate_events, from_kafka
from services.cli.ops.threadview import latest_states
from services.kafka.clients import KafkaError, TopicPartition, new_producer
from services.kafka.reader import TopicReader, UnknownTopicError
from services.runtime.lifecycle import run_until_signalled
from services.runtime.settings import KafkaSettings

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def stdout() -> Console:
    """The console for results (created per call so test runners can capture it)."""
    return Console(highlight=False, soft_wrap=True)


def stderr() -> Console:
    """The console for progress and errors."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class ThreadRecords:
    """What the topics hold about one thread."""

    thread_id: str
    state: ThreadState | None
    events: list[OpsRecord] = field(default_factory=list)
    decisions: list[OpsRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


async def _keyed(reader: TopicReader, topic: str, key: str, settings: KafkaSettings
                 ) -> list[OpsRecord]:
    tp = await reader.key_partition(topic, key)
    records = await reader.read_all([tp])
    converted = (from_kafka(r, settings.topics) for r in records)
    return [r for r in converted if r.key == key]


async def read_state(settings: KafkaSettings, thread_id: str) -> ThreadState | None:
    """The thread's live state on the compacted ``threads`` topic, if any."""
    async with TopicReader(settings, "agui-relay-ops") as reader:
        records = await _keyed(reader, settings.topics.threads, thread_id, settings)
    return latest_states(records)[0].get(thread_id)


async def read_thread(settings: KafkaSettings, thread_id: str, *, decisions: bool = True
                      ) -> ThreadRecords:
    """The thread's state, its events (duplicates dropped) and its decisions."""
    topics = settings.topics
    async with TopicReader(settings, "agui-relay-ops") as reader:
        states, warnings = latest_states(await _keyed(reader, topics.threads, thread_id,
                                                      settings))
        events = drop_duplicate_events(await _keyed(reader, topics.events, thread_id, settings))
        found = await _keyed(reader, topics.decisions, thread_id, settings) if decisions else []
    return ThreadRecords(thread_id, states.get(thread_id), events, found, warnings)


async def publish(settings: KafkaSettings, topic: str, key: str, value: bytes,
                  headers: Sequence[tuple[str, bytes]] = ()) -> tuple[int, int]:
    """Write one record keyed ``key``; returns its (partition, offset)."""
    producer = new_producer(settings, "agui-relay-ops")
    try:
        await producer.start()
        meta = await producer.send_and_wait(topic, value, key=key.encode(),
                                            headers=list(headers) or None)
    finally:
        await producer.stop()
    return int(meta.partition), int(meta.offset)


async def select_partitions(reader: TopicReader, wanted: Sequence[tuple[str, str | None]]
                            ) -> list[TopicPartition]:
    """The partitions for (topic, key-or-None) selections.

    A key selects the one partition the key maps to (Kafka's default
    partitioner); None selects every partition of the topic.
    """
    partitions: list[TopicPartition] = []
    for topic, key in wanted:
        if key is None:
            partitions += await reader.all_partitions(topic)
        else:
            partitions.append(await reader.key_partition(topic, key))
    return partitions


def run_command(body: Callable[[asyncio.Event], Awaitable[int]]) -> int:
    """Run ``body(stop)``; Ctrl-C sets ``stop`` (twice cancels). Returns the exit code."""
    result = EXIT_INTERRUPTED
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # errors are reported below

    async def main(stop: asyncio.Event) -> None:
        nonlocal result
        try:
            result = await body(stop)
        except UnknownTopicError as exc:
            stderr().print(f"[red]error:[/] {exc}")
            result = EXIT_ERROR
        except KafkaError as exc:
            stderr().print(f"[red]Kafka error:[/] {exc} (is the broker at "
                           "KAFKA_BOOTSTRAP_SERVERS running?)")
            result = EXIT_ERROR

    run_until_signalled(main)
    return result
