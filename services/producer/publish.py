"""Writing event records: one AG-UI event per record, keyed by threadId, headers on each.

Every record on ``events`` carries the ``EventHeaders`` (run id, event type,
agent, per-run sequence number) so consumers restore order and drop
duplicates without decoding the value; a run's records share the thread's
key, and so its partition, and one idempotent producer keeps them in the
order they were sent. ``RunWriter`` is the hot path of a worker: it names
the partition itself (the one Kafka's default partitioner gives the key, so
nothing changes for readers) and reuses the header bytes that do not change
within a run, instead of hashing the key and encoding five headers for each
streamed delta. Every record of a run carries the run's ``traceparent``
(the worker's hop of the trace its dispatch carried) when it has one.
Every record is measured before it is sent (``sizes.RecordGuard``): one
the broker would refuse raises ``RecordTooLargeError`` (``event_too_large``)
and nothing is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import orjson
from ag_ui.core import BaseEvent

from contracts import EventHeaders
from contracts.codec import EVENT_DECODER, to_wire
from contracts.headers import AGENT, EVENT_TYPE, RUN_ID, SCHEMA, SEQ, TRACEPARENT
from services.kafka.clients import AIOKafkaProducer
from services.kafka.partitioning import partition_for
from services.producer.sizes import RecordGuard

EVENT_CODE = "event_too_large"


class RunWriter:
    """Sends one run's records to ``topic`` on the thread's partition."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, thread_id: str, run_id: str,
                 agent: str, partitions: int | None = None,
                 traceparent: str | None = None, *, guard: RecordGuard) -> None:
        self.producer = producer
        self.guard = guard
        self.topic = topic
        self.key = thread_id.encode()
        self.partition = partition_for(self.key, partitions) if partitions else None
        self._run = (RUN_ID, run_id.encode())
        self._agent = (AGENT, agent.encode())
        self._trace = [(TRACEPARENT, traceparent.encode())] if traceparent else []
        self._types: dict[str, tuple[str, bytes]] = {}

    def headers(self, event_type: str, seq: int) -> list[tuple[str, bytes]]:
        """The same headers as ``EventHeaders(...).encode()``, built from cached parts."""
        kind = self._types.get(event_type)
        if kind is None:
            kind = self._types[event_type] = (EVENT_TYPE, event_type.encode())
        return [self._run, kind, self._agent, (SEQ, str(seq).encode()), (SCHEMA, b"1"),
                *self._trace]

    def send(self, event_type: str, seq: int, value: bytes) -> Awaitable[asyncio.Future[Any]]:
        """Enqueue one record: awaiting this gives the future that resolves once the broker
        has it (the producer's own coroutine, not wrapped in one more per event).
        ``RecordTooLargeError`` when the record would not fit (nothing is sent)."""
        headers = self.headers(event_type, seq)
        size = self.guard.limit.excess(self.key, value, headers)
        if size is not None:  # (the message is built only then: this runs per event)
            raise self.guard.refused(f"{event_type} #{seq}", EVENT_CODE, size)
        sent: Awaitable[asyncio.Future[Any]] = self.producer.send(
            self.topic, value, key=self.key, partition=self.partition, headers=headers)
        return sent

    def excess(self, event_type: str, seq: int, value: bytes) -> int | None:
        """The record's size when it would not fit, else None."""
        return self.guard.limit.excess(self.key, value, self.headers(event_type, seq))


async def event_partitions(producer: AIOKafkaProducer, topic: str) -> int:
    """How many partitions ``topic`` has, from the producer's metadata."""
    return len(await producer.partitions_for(topic))


async def send_event(producer: AIOKafkaProducer, topic: str, thread_id: str, headers: EventHeaders,
                     value: bytes, guard: RecordGuard) -> asyncio.Future[Any]:
    """Enqueue one event record (default partitioner); resolves once the broker has it.
    ``RecordTooLargeError`` when the record would not fit (nothing is sent)."""
    key, encoded = thread_id.encode(), headers.encode()
    guard.check(f"{headers.event_type} #{headers.seq}", EVENT_CODE, key, value, encoded)
    future: asyncio.Future[Any] = await producer.send(topic, value, key=key, headers=encoded)
    return future


def event_bytes(event: BaseEvent, clock: Callable[[], datetime]) -> bytes:
    """A runtime-built event's wire bytes: validated, timestamped if it has no timestamp."""
    wire = to_wire(event)
    if wire.get("timestamp") is None:
        wire["timestamp"] = int(clock().timestamp() * 1000)
    EVENT_DECODER.validate_python(wire)
    return orjson.dumps(wire)
