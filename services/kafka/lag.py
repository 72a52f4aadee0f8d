"""Consumer lag as a service sees it: how far its own consumer is behind each partition.

``agui-relay lag`` asks the brokers about committed offsets; a running
service knows better and for free: for every partition its consumer is
assigned, the end the last fetch reported (the last stable offset for a
``read_committed`` consumer, whose position can never pass it; else the
high watermark) minus the consumer's position. Partitions not fetched yet
(no end known) are left out rather than guessed. ``LagProbe`` publishes
this as ``agui_consumer_lag`` at most every ``interval_s`` seconds, called
from a service's poll loop.
"""

from __future__ import annotations

import asyncio
import time

from services.kafka.clients import AIOKafkaConsumer, KafkaError
from services.runtime.metrics import LagRow, set_lag

POSITION_TIMEOUT_S = 0.5
"""A position still being reset (after a seek) is not waited for longer than this."""


async def consumer_lag(consumer: AIOKafkaConsumer) -> list[LagRow]:
    """The lag of each assigned partition whose end the consumer knows."""
    rows = []
    for tp in sorted(consumer.assignment()):
        lso = consumer.last_stable_offset(tp)
        end = lso if lso is not None and lso >= 0 else consumer.highwater(tp)
        if end is None:
            continue
        try:
            async with asyncio.timeout(POSITION_TIMEOUT_S):
                position = await consumer.position(tp)
        except (TimeoutError, KafkaError, AssertionError):
            continue  # being reset, or unassigned meanwhile: next sample
        rows.append(LagRow(tp.topic, tp.partition, max(int(end) - int(position), 0)))
    return rows


class LagProbe:
    """Publishes one consumer's lag, at most every ``interval_s`` seconds."""

    def __init__(self, group: str, interval_s: float = 5.0) -> None:
        self.group = group
        self.interval_s = interval_s
        self._last = float("-inf")

    async def maybe_sample(self, consumer: AIOKafkaConsumer) -> None:
        """Sample now if the interval has passed since the last sample."""
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return
        self._last = now
        await self.sample(consumer)

    async def sample(self, consumer: AIOKafkaConsumer) -> None:
        """Sample and publish now."""
        set_lag(self.group, await consumer_lag(consumer))

    def clear(self) -> None:
        """Withdraw the group's samples (the consumer stopped)."""
        set_lag(self.group, ())
