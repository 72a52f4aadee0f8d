"""What the instance's background readers share: a task, a consumer, topics.

The fan-out (a member of the consumer-service group, reading the
partitions this instance owns) and the thread view (group-less, every
partition of the compacted topic) each run one consumer in a task of their
own for the life of the app. ``BackgroundReader`` starts and stops
that task and its consumer the same way for both, and tells liveness
(``running`` turns false when the task died); ``wait_for_partitions`` holds
a reader back, with backoff, until its topics exist; ``Progress`` wakes a
route waiting for a reader to move on (``freshness``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from services.kafka.clients import AIOKafkaConsumer, KafkaError
from services.kafka.metadata import partition_counts
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)


async def wait_for_partitions(kafka: KafkaSettings, names: tuple[str, ...]) -> dict[str, int]:
    """Each topic's partition count, waiting (with backoff) until all of them exist."""
    delay = 0.2
    while True:
        try:
            counts = await partition_counts(kafka, names)
        except KafkaError as exc:
            log.warning("cannot read topic metadata yet: %s", exc)
            counts = {}
        missing = [n for n in names if n not in counts]
        if not missing:
            return counts
        log.warning("waiting for topics %s", ", ".join(missing))
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


class Progress:
    """Wakes whoever waits for a reader to hand over its next batch.

    The reader calls ``moved`` after each batch it applied; ``next`` returns at
    the next ``moved`` or after ``within_s``, whichever comes first (a waiter
    checks its own condition again either way: a reader's position may also
    move without a batch, over transaction markers).
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def moved(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def next(self, within_s: float) -> None:
        if within_s <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                await self._event.wait()


class BackgroundReader:
    """A consumer read by one task for the life of the app."""

    name = "reader"

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def consumer(self) -> AIOKafkaConsumer | None:
        """The reader's consumer once started (its lag is sampled for /metrics)."""
        return self._consumer

    @property
    def running(self) -> bool:
        """False once the reader task has ended (liveness)."""
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"consumer-{self.name}")

    async def stop(self) -> None:
        """End the task and stop the consumer, also when the task had failed (its consumer
        would go on refreshing metadata, and the app's shutdown would fail on the error)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception as exc:
                log.warning("%s had stopped on an error: %r", self.name, exc)
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def _start_consumer(self, make: Callable[[], AIOKafkaConsumer]) -> AIOKafkaConsumer:
        """A started consumer from ``make``, retried with backoff while the broker is away."""
        delay = 0.2
        while True:
            consumer = self._consumer = make()
            try:
                await consumer.start()
            except KafkaError as exc:
                log.warning("%s cannot reach the broker yet: %s", self.name, exc)
                await consumer.stop()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            return consumer

    async def _run(self) -> None:
        raise NotImplementedError
