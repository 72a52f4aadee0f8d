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

from rich.console import Console

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
