"""Waiting on the topics for what a command caused: its decision, then its run's end.

``resume`` submits a request and must show the gatekeeper's decision for
that ``requestId`` (from ``decisions``), then the run it admitted as it
streams (from ``events``, by its thread's key and the run-id header) until the
terminal event;
``cancel --follow`` waits for the cancelled run's end. Decisions and events
travel on different topics, so a run's first events could be read before
its decision: the watcher holds them and replays them after the decision.
The reader must be assigned (at the end offsets) *before* the command
writes, so nothing it causes can be missed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from contracts.headers import EVENT_TYPE, RUN_ID
from services.kafka.reader import TopicReader
from services.kafka.records import Deduper, OpsRecord, from_kafka
from services.runtime.settings import KafkaSettings

TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})


class Watcher:
    """Reads an assigned reader's records one at a time, for decisions and run ends."""

    def __init__(self, reader: TopicReader, settings: KafkaSettings, stop: asyncio.Event,
                 emit: Callable[[OpsRecord], None]) -> None:
        self._batches = reader.batches(stop=stop, heartbeat=True)
        self._catalog = settings.topics
        self._emit = emit
        self._buffer: deque[OpsRecord] = deque()
        self._deduper = Deduper()

    async def close(self) -> None:
        await self._batches.aclose()

    async def _next(self, deadline: float | None) -> OpsRecord | None:
        """The next record, or None at the deadline or on stop."""
        while not self._buffer:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            try:
                batch = await anext(self._batches)
            except StopAsyncIteration:
                return None
            for record in batch:
                rec = from_kafka(record, self._catalog)
                if self._deduper.fresh(rec):
                    self._buffer.append(rec)
        return self._buffer.popleft()

    async def decision(self, request_id: str, within_s: float) -> OpsRecord | None:
        """The final decision on ``request_id`` (a ``queued`` one is shown and waited past)."""
        deadline: float | None = time.monotonic() + within_s
        held: list[OpsRecord] = []
        try:
            while (rec := await self._next(deadline)) is not None:
                if rec.role != "decisions" or rec.fields.get("requestId") != request_id:
                    held.append(rec)
                    continue
                self._emit(rec)
                if rec.fields.get("verdict") != "queued":
                    return rec
                deadline = None  # decided when the running run ends, however long that is
            return None
        finally:
            self._buffer.extendleft(reversed(held))

    async def run_end(self, thread_id: str, run_id: str, within_s: float | None = None
                      ) -> OpsRecord | None:
        """Show the thread's ``run_id`` events until its terminal one (returned), or None.

        The record key is checked as well as the run-id header: run ids are the client's
        and unique per thread only, and another thread of the same partition may run a
        namesake whose end is not this run's."""
        deadline = None if within_s is None else time.monotonic() + within_s
        while (rec := await self._next(deadline)) is not None:
            if (rec.role != "events" or rec.key != thread_id
                    or rec.headers.get(RUN_ID) != run_id):
                continue
            self._emit(rec)
            if (rec.headers.get(EVENT_TYPE) or rec.fields.get("type")) in TERMINAL:
                return rec
        return None
