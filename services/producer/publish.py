"""Writing event records: one AG-UI event per record, keyed by threadId, headers on each.

Every record on ``events`` carries ``EventHeaders`` (run id, event type,
agent, per-run sequence number) so consumers restore order and drop
duplicates without decoding the value; a run's records share the thread's
key and therefore its partition, and one idempotent producer keeps them in
the order they were sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
from ag_ui.core import BaseEvent

from contracts import EventHeaders
from contracts.codec import EVENT_DECODER, to_wire
from services.kafka.clients import AIOKafkaProducer


async def send_event(producer: AIOKafkaProducer, topic: str, thread_id: str, headers: EventHeaders,
                     value: bytes) -> asyncio.Future[Any]:
    """Enqueue one event record; the returned future resolves once the broker has it."""
    future: asyncio.Future[Any] = await producer.send(topic, value, key=thread_id.encode(),
                                                      headers=headers.encode())
    return future


def event_bytes(event: BaseEvent, clock: Callable[[], datetime]) -> bytes:
    """A runtime-built event's wire bytes: validated, timestamped if it has no timestamp."""
    wire = to_wire(event)
    if wire.get("timestamp") is None:
        wire["timestamp"] = int(clock().timestamp() * 1000)
    EVENT_DECODER.validate_python(wire)
    return orjson.dumps(wire)
