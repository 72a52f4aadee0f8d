"""Following decisions and run endings live, for the load generator.

The load generator submits a request and must learn its decision, and then
how its run ended, to send the next step of the flow (a resume answering
the interrupts the run raised). ``Follower`` reads every partition of
``decisions`` and ``events`` (group-less, ``read_committed``) from the
beginning of the scenario's private topics and wakes whoever waits on a
(threadId, requestId) decision or a (threadId, runId) terminal event. It
survives a broker outage: the consumer keeps retrying, and waiters simply
wait longer (their own deadlines bound them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import orjson

from contracts import Decision, DecodeError, EventHeaders, decode
from services.kafka.clients import AIOKafkaConsumer, KafkaError, TopicPartition, new_consumer
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

TERMINALS = frozenset({"RUN_FINISHED", "RUN_ERROR"})


@dataclass(frozen=True, slots=True)
class Ending:
    """How a run ended: its terminal event's wire JSON and when it was seen."""

    event_type: str
    event: dict[str, Any]
    seen_at: float

    @property
    def interrupts(self) -> list[dict[str, Any]]:
        """The interrupts an interrupt outcome carries, in wire form (else empty)."""
        outcome = self.event.get("outcome")
        if self.event_type != "RUN_FINISHED" or not isinstance(outcome, dict):
            return []
        if outcome.get("type") != "interrupt":
            return []
        return [i for i in outcome.get("interrupts", []) if isinstance(i, dict)]

    @property
    def interrupt_ids(self) -> list[str]:
        """The ids of the interrupts an interrupt outcome carries (else empty)."""
        return [str(i.get("id")) for i in self.interrupts]

    @property
    def outcome(self) -> str:
        if self.event_type == "RUN_ERROR":
            return f"error:{self.event.get('code', '')}"
        outcome = self.event.get("outcome")
        return str(outcome.get("type")) if isinstance(outcome, dict) else "success"


class Follower:
    """Decisions per (threadId, requestId), endings per (threadId, runId), as they commit."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.decisions: dict[tuple[str, str], list[tuple[float, Decision]]] = defaultdict(list)
        self.endings: dict[tuple[str, str], Ending] = {}
        self.decision_times: list[float] = []
        self._waiters: dict[tuple[str, str, str], asyncio.Event] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Follower:
        topics = self.settings.topics
        consumer = new_consumer(self.settings, "agui-faults-follower", group_id=None,
                                max_poll_records=2000)
        await consumer.start()
        partitions = [TopicPartition(t, p) for t in (topics.decisions, topics.events)
                      for p in range(self.settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        self._consumer = consumer
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def _read(self) -> None:
        assert self._consumer is not None
        decisions = self.settings.topics.decisions
        while True:
            try:
                got = await self._consumer.getmany(timeout_ms=200)
            except KafkaError as exc:  # broker away: keep trying, waiters have deadlines
                log.info("follower: %s", exc)
                await asyncio.sleep(0.5)
                continue
            now = time.monotonic()
            for tp, records in got.items():
                for record in records:
                    if tp.topic == decisions:
                        self._decision(record.value, now)
                    else:
                        self._event(record, now)

    def _wake(self, kind: str, a: str, b: str) -> None:
        event = self._waiters.get((kind, a, b))
        if event is not None:
            event.set()

    def _decision(self, value: bytes | None, now: float) -> None:
        try:
            decision = decode(Decision, value or b"")
        except DecodeError:
            return
        ids = (decision.thread_id or "", decision.request_id)
        self.decisions[ids].append((now, decision))
        self.decision_times.append(now)
        self._wake("d", *ids)

    def _event(self, record: Any, now: float) -> None:
        headers = EventHeaders.decode(record.headers)
        if headers is None or headers.event_type not in TERMINALS or record.key is None:
            return
        ids = (record.key.decode("utf-8", "replace"), headers.run_id)
        if ids in self.endings:
            return
        try:
            event = orjson.loads(record.value or b"{}")
        except orjson.JSONDecodeError:
            event = {}
        self.endings[ids] = Ending(headers.event_type, event if isinstance(event, dict) else {},
                                   now)
        self._wake("e", *ids)

    async def _wait(self, kind: str, a: str, b: str, ready: Any, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        key = (kind, a, b)
        event = self._waiters.setdefault(key, asyncio.Event())
        try:
            while not ready():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
            return True
        finally:
            self._waiters.pop(key, None)

    async def decision(self, thread_id: str, request_id: str, timeout_s: float,
                       after: int = 0) -> Decision | None:
        """The first final decision past the ``after`` first ones, or None on timeout."""
        ids = (thread_id, request_id)

        def final() -> Decision | None:
            for _, d in self.decisions.get(ids, [])[after:]:
                if d.verdict != "queued":
                    return d
            return None

        await self._wait("d", thread_id, request_id, lambda: final() is not None, timeout_s)
        return final()

    async def ending(self, thread_id: str, run_id: str, timeout_s: float) -> Ending | None:
        """How the run ended, or None on timeout."""
        ids = (thread_id, run_id)
        await self._wait("e", thread_id, run_id, lambda: ids in self.endings, timeout_s)
        return self.endings.get(ids)
