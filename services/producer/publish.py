"""Writing event records: one AG-UI event per record, keyed by threadId, headers on each.

Every record on ``events`` carries the ``EventHeaders`` (run id, event type,
agent, per-run sequence number) so consumers restore order and drop
duplicates without decoding the value; a run's records share the thread's
key, and so its partition, and one idempotent producer keeps them in the
order they were sent. ``RunWriter`` is the hot path of a worker: it names
the partition itself (the one the relay's producers give the key: among
``AGUI_PARTITIONS``, ``services.kafka.partitioning``) and reuses the header
bytes that do not change within a run, instead of hashing the key and
encoding five headers for each streamed delta. Every record of a run
carries the run's ``traceparent`` (the worker's hop of the trace its
dispatch carried) when it has one.
Every record is measured before it is sent (``sizes.RecordGuard``): one
the broker would refuse raises ``RecordTooLargeError`` (``event_too_large``)
and nothing is sent.

A run's boundary records (its ``RUN_STARTED`` and its terminal event) are
written a second time, the same bytes and headers, to the small
co-partitioned ``runs`` topic (``send_boundary``), which is all the
gatekeeper reads of runs. **A run's end is on ``runs`` if and only if it is
on ``events``**, because of the order a run ends in (``KafkaRunSink``):

1. every earlier record of the run is acknowledged (``events`` and ``runs``);
2. the terminal record is written to ``runs`` and acknowledged;
3. only then the same record is written to ``events`` and acknowledged.

So whatever a client has seen of ``events`` — the end included — the
gatekeeper can already read on ``runs`` (a resume sent the moment its
interrupt arrived never meets the thread still running), and a worker dying
at any point leaves one of: no end anywhere, the end on ``runs`` only (died
between 2 and 3), or the end on both. The worker that takes the partition
over closes the run from its start marker (``recovery``), reading both
topics: an end found on ``runs`` only is copied to ``events`` (every record
``events`` lacks, so its sequence has no gap: step 1 made it complete up to
the end); no end at all gets a ``RUN_ERROR`` written to ``runs`` first, then
to ``events``, in the same order. An end on ``events`` only (written by a
worker of an earlier version, which knew no ``runs``) is copied to ``runs``.
Copies are the bytes and headers found, so both topics carry the same end;
the gatekeeper and the consumer service see one run end, whichever they read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from ag_ui.core import BaseEvent

from contracts import EventHeaders, TopicCatalog
from contracts.codec import EVENT_DECODER, to_wire
from contracts.headers import AGENT, EVENT_TYPE, RUN_ID, SCHEMA, SEQ, TRACEPARENT, header_value
from contracts.topics import BOUNDARY_TYPES
from services.kafka.clients import AIOKafkaProducer
from services.kafka.partitioning import hashed_among, partition_for
from services.producer.sizes import RecordGuard

EVENT_CODE = "event_too_large"


class RunWriter:
    """Sends one run's records to ``topic`` on the thread's partition, and its boundary
    records to ``boundaries`` (``runs``) too."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, thread_id: str, run_id: str,
                 agent: str, partitions: int | None = None,
                 traceparent: str | None = None, *, guard: RecordGuard,
                 boundaries: Destination) -> None:
        self.producer = producer
        self.guard = guard
        self.topic = topic
        self.key = thread_id.encode()
        self.run_id = run_id
        self.partition = partition_for(self.key, partitions) if partitions else None
        self.boundaries = boundaries.topic
        self.boundary_partition = (partition_for(self.key, boundaries.partitions)
                                   if boundaries.partitions else None)
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
        return self._send(self.topic, self.partition, event_type, seq, value)

    def send_boundary(self, event_type: str, seq: int,
                      value: bytes) -> Awaitable[asyncio.Future[Any]]:
        """``send`` to the boundary topic (``runs``): the same record, key and headers."""
        return self._send(self.boundaries, self.boundary_partition, event_type, seq, value)

    def _send(self, topic: str, partition: int | None, event_type: str, seq: int,
              value: bytes) -> Awaitable[asyncio.Future[Any]]:
        headers = self.headers(event_type, seq)
        size = self.guard.limit.excess(self.key, value, headers)
        if size is not None:  # (the message is built only then: this runs per event)
            raise self.guard.refused(f"{event_type} #{seq}", EVENT_CODE, size)
        sent: Awaitable[asyncio.Future[Any]] = self.producer.send(
            topic, value, key=self.key, partition=partition, headers=headers)
        return sent

    def excess(self, event_type: str, seq: int, value: bytes) -> int | None:
        """The record's size when it would not fit, else None."""
        return self.guard.limit.excess(self.key, value, self.headers(event_type, seq))


@dataclass(frozen=True, slots=True)
class Destination:
    """A topic, and its partition count when known (records then name their partition)."""

    topic: str
    partitions: int | None = None


async def event_partitions(producer: AIOKafkaProducer, topic: str, configured: int) -> int:
    """How many of ``topic``'s partitions a thread is hashed among (``configured``:
    AGUI_PARTITIONS, fewer when the topic has fewer), from the producer's metadata."""
    return hashed_among(configured, len(await producer.partitions_for(topic)))


async def send_event(producer: AIOKafkaProducer, topic: str, thread_id: str,
                     headers: EventHeaders | Sequence[tuple[str, bytes]],
                     value: bytes, guard: RecordGuard) -> asyncio.Future[Any]:
    """Enqueue one event record (the producer's partitioner); resolves once the broker
    has it.

    ``headers``: the record's ``EventHeaders``, or the headers of a record being copied
    as they were read. ``RecordTooLargeError`` when the record would not fit (nothing
    is sent)."""
    key = thread_id.encode()
    encoded = headers.encode() if isinstance(headers, EventHeaders) else list(headers)
    guard.check(f"{header_value(encoded, EVENT_TYPE)} #{header_value(encoded, SEQ)}",
                EVENT_CODE, key, value, encoded)
    future: asyncio.Future[Any] = await producer.send(topic, value, key=key, headers=encoded)
    return future


def event_bytes(event: BaseEvent, clock: Callable[[], datetime]) -> bytes:
    """A runtime-built event's wire bytes: validated, timestamped if it has no timestamp."""
    wire = to_wire(event)
    if wire.get("timestamp") is None:
        wire["timestamp"] = int(clock().timestamp() * 1000)
    EVENT_DECODER.validate_python(wire)
    return orjson.dumps(wire)


async def publish_acknowledged(producer: AIOKafkaProducer, topics: TopicCatalog, thread_id: str,
                               headers: EventHeaders, value: bytes) -> None:
    """Publish one event record as a run does, one at a time: a boundary to ``runs``
    first, then every record to ``events``, each acknowledged before the next write
    (for tools and tests that write a run's events themselves)."""
    key, encoded = thread_id.encode(), headers.encode()
    if headers.event_type in BOUNDARY_TYPES:
        await producer.send_and_wait(topics.runs, value, key=key, headers=encoded)
    await producer.send_and_wait(topics.events, value, key=key, headers=encoded)
