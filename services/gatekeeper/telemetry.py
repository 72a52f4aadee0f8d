"""What the gatekeeper tells Prometheus, recorded where it becomes true.

The Kafka loop (``processor``, ``commit``, ``takeover``) calls this at four
points and nowhere else:

- ``restored(p, states)`` when it takes partition p over;
- ``committed(p, batch, polled_at)`` after p's transaction committed: the
  decisions by verdict and code, their latency (request ``submittedAt`` to
  ``decidedAt``), the batch's processing time (its first request polled to
  the commit), the dead letters by reason, and the new thread states for
  the census. Nothing is counted for a transaction that was aborted: its
  records are decided again;
- ``released(ps)`` when it hands partitions back;
- ``tick(consumer, now)`` from its poll loop: at most every ``interval_s``
  seconds, the census gauges (open, expired-unanswered interrupts, threads
  running too long, non-idle threads by status) and the consumer's lag.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta

from contracts import ThreadState
from services.gatekeeper.batch import Batch
from services.gatekeeper.census import Census
from services.kafka.clients import AIOKafkaConsumer
from services.kafka.lag import LagProbe
from services.runtime import metrics

SERVICE = "gatekeeper"


class Telemetry:
    """The gatekeeper's metrics, fed by the processor."""

    def __init__(self, group: str, *, interval_s: float, running_limit_s: float) -> None:
        self.census = Census()
        self.interval_s = interval_s
        self.running_limit = timedelta(seconds=running_limit_s)
        self.lag = LagProbe(group, interval_s)
        self._last = float("-inf")
        self._m = metrics.instruments()

    def restored(self, partition: int, states: Mapping[str, ThreadState]) -> None:
        """Partition ``partition`` was taken over with these thread states."""
        self.census.restore(partition, states)

    def included(self, partition: int, states: Mapping[str, ThreadState]) -> None:
        """Threads of ``partition`` read after its takeover, none committed since."""
        self.census.include(partition, states)

    def released(self, partitions: list[int]) -> None:
        """Partitions handed back: their threads are another instance's to count."""
        self.census.release(partitions)

    def committed(self, partition: int, batch: Batch | None, polled_at: float | None) -> None:
        """Record what partition ``partition``'s committed transaction wrote."""
        if batch is None:
            return
        m = self._m
        decisions = batch.decisions
        verdicts = Counter((d.verdict, d.code or metrics.NO_CODE) for d in decisions)
        for (verdict, code), n in verdicts.items():
            m.decisions.labels(verdict, code).inc(n)
        latency = m.decision_latency
        for d in batch.decided:
            if d.submitted_at is not None:
                latency.observe(max((d.decision.decided_at - d.submitted_at).total_seconds(), 0.0))
        if polled_at is not None and decisions:
            m.processing.observe(time.monotonic() - polled_at)
        for letter in batch.dead_letters:
            metrics.dead_letter(SERVICE, letter.code)
        if batch.states:
            self.census.update(partition, batch.states)

    async def tick(self, consumer: AIOKafkaConsumer, now: datetime) -> None:
        """Refresh the census gauges and the lag when ``interval_s`` has passed."""
        moment = time.monotonic()
        if moment - self._last < self.interval_s:
            return
        self._last = moment
        self.publish(now)
        await self.lag.sample(consumer)

    def publish(self, now: datetime) -> None:
        """Set the census gauges for ``now``."""
        counts = self.census.count(now, self.running_limit)
        m = self._m
        m.threads.labels("running").set(counts.running)
        m.threads.labels("interrupted").set(counts.interrupted)
        m.open_interrupts.set(counts.open_interrupts)
        m.expired_interrupts.set(counts.expired_interrupts)
        m.running_too_long.set(counts.running_too_long)
        metrics.census_published = True

    def stopped(self) -> None:
        """The processor stopped: withdraw its lag samples."""
        self.lag.clear()
