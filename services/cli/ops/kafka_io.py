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
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    KafkaConnectionError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NodeNotReadyError,
    NotCoordinatorForGroupError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    RequestTimedOutError,
)
from rich.console import Console

from services.cli.ops.safe import markup
from services.kafka.clients import KafkaError, TopicPartition, new_producer
from services.kafka.reader import TopicReader, UnknownTopicError
from services.kafka.thread_log import Progress, ReadStoppedError
from services.runtime.lifecycle import run_until_signalled
from services.runtime.settings import KafkaSettings

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
NOTE_EVERY_S = 5.0
"""How often a long read says how far it is, when stderr is not a terminal."""


def stdout() -> Console:
    """The console for results (created per call so test runners can capture it)."""
    return Console(highlight=False, soft_wrap=True)


def stderr() -> Console:
    """The console for progress and errors."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def reading(what: str) -> Iterator[Progress]:
    """Progress on stderr while ``what`` (rich markup: escape what it quotes) is read: a
    thread's partition can hold millions
    of records, seconds of reading. A terminal gets a status line, erased after; anything
    else (a log, a pipe) a line when the read begins and one every ``NOTE_EVERY_S``."""
    console = stderr()
    if console.is_terminal:
        with console.status(f"reading {what}") as status:

            def update(topic: str, done: int, total: int) -> None:
                status.update(f"reading {what}: {markup(topic)}, {done:,} of {total:,} records")

            yield update
        return
    console.print(f"reading {what}")
    noted = time.monotonic()

    def note(topic: str, done: int, total: int) -> None:
        nonlocal noted
        if time.monotonic() - noted >= NOTE_EVERY_S:
            noted = time.monotonic()
            console.print(f"reading {what}: {markup(topic)}, {done:,} of {total:,} records")

    yield note


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


_UNREACHED = (NodeNotReadyError, KafkaConnectionError, RequestTimedOutError, KafkaTimeoutError,
              LeaderNotAvailableError, NotEnoughReplicasError,
              NotEnoughReplicasAfterAppendError)
_COORDINATOR_MOVING = (NotCoordinatorForGroupError, GroupCoordinatorNotAvailableError,
                       GroupLoadInProgressError)


def kafka_hint(exc: KafkaError) -> str:
    """What an operator should check after ``exc``, by what it says of the cluster.

    A command reads every partition's leader and asks each group's
    coordinator: one node down out of three fails it with the node it could
    not reach, while the others answer. "Is the broker running?" then sent
    the operator to the one address that did answer.
    """
    if isinstance(exc, _COORDINATOR_MOVING):
        return "a consumer group's coordinator is moving (a broker restarting); try again"
    if isinstance(exc, _UNREACHED):
        return ("a broker did not answer: the command needs the leader of every partition "
                "it reads; are all of the cluster's brokers running?")
    return "is the broker at KAFKA_BOOTSTRAP_SERVERS running?"


def run_command(body: Callable[[asyncio.Event], Awaitable[int]]) -> int:
    """Run ``body(stop)``; Ctrl-C sets ``stop`` (twice cancels). Returns the exit code."""
    result = EXIT_INTERRUPTED
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # errors are reported below

    async def main(stop: asyncio.Event) -> None:
        nonlocal result
        try:
            result = await body(stop)
        except ReadStoppedError:
            stderr().print("[yellow]stopped[/] (Ctrl-C) before the read was done")
            result = EXIT_INTERRUPTED
        except UnknownTopicError as exc:
            stderr().print(f"[red]error:[/] {markup(exc)}")
            result = EXIT_ERROR
        except KafkaError as exc:
            stderr().print(f"[red]Kafka error:[/] {markup(exc)} ({markup(kafka_hint(exc))})")
            result = EXIT_ERROR

    run_until_signalled(main)
    return result
