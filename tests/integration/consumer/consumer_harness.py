"""Test harness for the consumer service on the real broker.

``serving(kafka, **settings)`` runs the real app (``services.consumer.server.serve``)
in the test's event loop on a free port. ``Backstage`` plays the gatekeeper
and the producer by writing what they would write — Decision, event and
ThreadState records with their real headers — so each test decides what the
service sees, record by record, on the real topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson

from contracts import (
    ControlCommand,
    Decision,
    EventHeaders,
    RunRequest,
    ThreadState,
    decode,
    encode,
)
from contracts.headers import AGENT as AGENT_HEADER
from contracts.headers import header_value
from services.consumer.app import create_app
from services.consumer.relay import Relay
from services.consumer.server import _Server, advertised_url, bind, config
from services.consumer.settings import ConsumerSettings
from services.kafka.admin import ensure_topics
from services.kafka.clients import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    TopicPartition,
    new_consumer,
    new_producer,
)
from services.runtime.settings import KafkaSettings, LimitSettings

WAIT_S = 20.0
AGENT = "scripted"


def kafka_settings(bootstrap: str, prefix: str) -> KafkaSettings:
    return KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=bootstrap, AGUI_TOPIC_PREFIX=prefix,
                         AGUI_PARTITIONS=4)


@dataclass
class Served:
    """A running consumer-service app."""

    url: str
    relay: Relay
    http: httpx.AsyncClient


@contextlib.asynccontextmanager
async def serving(kafka: KafkaSettings, limits: LimitSettings | None = None,
                  **overrides: Any) -> AsyncIterator[Served]:
    """The real app, served on 127.0.0.1 (free port) until the block ends."""
    settings = ConsumerSettings(http_port=0, **overrides)
    sock = bind(settings)
    app = create_app(settings, kafka, limits, url=advertised_url(settings, sock))
    relay: Relay = app.state.relay
    server = _Server(config(settings, app))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(WAIT_S):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.02)
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        url = f"http://{host}:{port}"
        async with httpx.AsyncClient(base_url=url, timeout=WAIT_S) as http:
            yield Served(url, relay, http)
    finally:
        server.should_exit = True
        await task
        sock.close()


def run_input(thread_id: str | None = None, run_id: str | None = None,
              **extra: Any) -> dict[str, Any]:
    """A minimal RunAgentInput in wire form."""
    return {"threadId": thread_id or f"th-{uuid.uuid4().hex[:8]}",
            "runId": run_id or f"run-{uuid.uuid4().hex[:8]}",
            "messages": [{"id": "m1", "role": "user", "content": "hi"}], **extra}


def started(thread_id: str, run_id: str) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}


def finished(thread_id: str, run_id: str, **extra: Any) -> dict[str, Any]:
    return {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id, **extra}


def text(message_id: str, delta: str) -> list[dict[str, Any]]:
    return [{"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": delta},
            {"type": "TEXT_MESSAGE_END", "messageId": message_id}]


class Backstage:
    """Plays gatekeeper and producer: reads requests, writes decisions, events, states."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self.producer: AIOKafkaProducer = new_producer(kafka, "backstage")
        self.requests: AIOKafkaConsumer = new_consumer(
            kafka, "backstage-requests", kafka.topics.requests,
            group_id=f"{kafka.topic_prefix}-backstage")

    async def start(self) -> None:
        await ensure_topics(self.kafka, (AGENT,))
        await self.producer.start()
        await self.requests.start()

    async def stop(self) -> None:
        await self.requests.stop()
        await self.producer.stop()

    async def next_request(self) -> RunRequest:
        """The next RunRequest the service published."""
        async with asyncio.timeout(WAIT_S):
            record = await self.requests.getone()
        assert record.key is not None
        request = decode(RunRequest, record.value)
        assert record.key.decode() == request.input.thread_id
        # the agent in a header too: the gatekeeper looks it up without parsing
        assert header_value(record.headers, AGENT_HEADER) == request.agent
        return request

    async def decide(self, request: RunRequest, verdict: str = "admitted", *,
                     code: str | None = None, interrupt_ids: Sequence[str] | None = None,
                     message: str = "decided by the test") -> None:
        decision = Decision(
            request_id=request.request_id, thread_id=request.input.thread_id,
            run_id=request.input.run_id, agent=request.agent,
            verdict=verdict, code=code, message=message,  # type: ignore[arg-type]
            interrupt_ids=list(interrupt_ids) if interrupt_ids else None,
            decided_at=datetime.now(UTC))
        await self.producer.send_and_wait(self.kafka.topics.decisions, encode(decision),
                                          key=request.input.thread_id.encode())

    async def emit(self, thread_id: str, run_id: str, events: Sequence[dict[str, Any]],
                   seqs: Sequence[int] | None = None) -> list[bytes]:
        """Write ``events`` as the producer would (seq 0, 1, ... unless given); their bytes."""
        values = []
        for i, event in enumerate(events):
            seq = seqs[i] if seqs is not None else i
            value = orjson.dumps(event)
            headers = EventHeaders(run_id, event["type"], AGENT, seq).encode()
            await self.producer.send_and_wait(self.kafka.topics.events, value,
                                              key=thread_id.encode(), headers=headers)
            values.append(value)
        return values

    async def write_state(self, state: ThreadState | None, thread_id: str) -> None:
        """Write a ThreadState (or a tombstone) to the compacted threads topic."""
        value = encode(state) if state is not None else None
        await self.producer.send_and_wait(self.kafka.topics.threads, value,
                                          key=thread_id.encode())

    async def control_commands(self, count: int) -> list[ControlCommand]:
        """The first ``count`` records of the control topic (waits for them)."""
        consumer = new_consumer(self.kafka, "backstage-control", group_id=None)
        await consumer.start()
        try:
            parts = [TopicPartition(self.kafka.topics.control, p)
                     for p in range(self.kafka.partitions)]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            out: list[ControlCommand] = []
            async with asyncio.timeout(WAIT_S):
                while len(out) < count:
                    batch = await consumer.getmany(timeout_ms=200)
                    out += [decode(ControlCommand, r.value) for rs in batch.values() for r in rs]
            return out
        finally:
            await consumer.stop()

    async def control_count(self) -> int:
        consumer = new_consumer(self.kafka, "backstage-control-count", group_id=None)
        await consumer.start()
        try:
            parts = [TopicPartition(self.kafka.topics.control, p)
                     for p in range(self.kafka.partitions)]
            ends = await consumer.end_offsets(parts)
            return sum(ends.values())
        finally:
            await consumer.stop()


def sse_frames(body: bytes) -> list[dict[str, str]]:
    """Split an SSE body into frames: {"id": ..., "data": ...} or {"comment": ...}."""
    assert b"\r" not in body
    frames = []
    for block in body.split(b"\n\n"):
        if not block:
            continue
        frame: dict[str, str] = {}
        for line in block.decode().split("\n"):
            if line.startswith(":"):
                frame["comment"] = line[1:].strip()
            else:
                name, _, value = line.partition(": ")
                frame[name] = value
        frames.append(frame)
    return frames


def data_values(body: bytes) -> list[bytes]:
    """The raw ``data:`` payloads of an SSE body, in order."""
    return [f["data"].encode() for f in sse_frames(body) if "data" in f]
