"""What the consumer service writes: RunRequests and ControlCommands.

One idempotent producer per instance (``acks=all``, no linger: a request is
latency-bound, not throughput-bound). Every record is keyed by threadId so
it lands in the thread's partition, next to the thread's other records. A
send not acknowledged within ``ack_timeout_s`` (the decision timeout) fails
as the broker being unavailable: with the broker down a POST had no answer
for minutes (found by probing). Such a record is not withdrawn: it stays in
the producer and is written once the broker is back (its request id and run
id keep it from running twice), so the answer says it may still be
(``NotAcknowledgedError``; a client told "could not publish" retried and was
refused ``duplicate_run_id`` for its own run: found by probing).
"""

from __future__ import annotations

import asyncio
import logging

from contracts import ControlCommand, RunRequest, encode
from contracts.headers import AGENT
from services.kafka.clients import AIOKafkaProducer, KafkaTimeoutError, new_producer
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)


class NotAcknowledgedError(KafkaTimeoutError):  # type: ignore[misc]
    """Sent, not acknowledged in time: the record may still be written later."""


class Publisher:
    """Writes to ``requests`` and ``control``."""

    def __init__(self, kafka: KafkaSettings, ack_timeout_s: float = 10.0) -> None:
        self.kafka = kafka
        self.ack_timeout_s = ack_timeout_s
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
        try:
            async with asyncio.timeout(self.ack_timeout_s):
                await self._producer.send_and_wait(topic, value, key=key.encode("utf-8"),
                                                   headers=headers)
        except TimeoutError:
            raise NotAcknowledgedError(f"the broker did not acknowledge it within "
                                  f"{self.ack_timeout_s:g} s") from None
