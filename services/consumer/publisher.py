"""What the consumer service writes: RunRequests and ControlCommands.

One idempotent producer per instance (``acks=all``, no linger: a request is
latency-bound, not throughput-bound). Every record is keyed by threadId so
it lands in the thread's partition, next to the thread's other records.
"""

from __future__ import annotations

import logging

from contracts import ControlCommand, RunRequest, encode
from contracts.headers import AGENT
from services.kafka.clients import AIOKafkaProducer, new_producer
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)


class Publisher:
    """Writes to ``requests`` and ``control``."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        self._producer = new_producer(self.kafka, "agui-consumer")
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def request(self, request: RunRequest) -> None:
        """Publish a RunRequest and wait for the broker's acknowledgement."""
        await self.send_request(request.input.thread_id, encode(request),
                                [(AGENT, request.agent.encode())])

    async def send_request(self, thread_id: str, value: bytes,
                           headers: list[tuple[str, bytes]] | None = None) -> None:
        """Publish an already encoded RunRequest (``headers``: its ``traceparent`` and
        ``agui-agent``, which lets the gatekeeper see the agent without parsing the value)."""
        await self._send(self.kafka.topics.requests, thread_id, value, headers)

    async def cancel(self, command: ControlCommand) -> None:
        """Publish a ControlCommand and wait for the broker's acknowledgement."""
        await self._send(self.kafka.topics.control, command.thread_id, encode(command))

    async def _send(self, topic: str, key: str, value: bytes,
                    headers: list[tuple[str, bytes]] | None = None) -> None:
        if self._producer is None:
            raise RuntimeError("publisher not started")
        await self._producer.send_and_wait(topic, value, key=key.encode("utf-8"),
                                           headers=headers)
