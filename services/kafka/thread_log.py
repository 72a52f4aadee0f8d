"""Everything the topics hold about one thread: its live state, events and decisions.

A thread's records all sit in one partition of each topic (the key decides
it), so one thread is read by reading those partitions and keeping its key:
bounded by the topics' retention, not by the deployment. Used by the
operator tools (``threads show``, ``resume``, ``cancel``, ``audit``) and by
the consumer service's inbox (a thread's tool-call arguments and audit trail).

The partition is read batch by batch and a record is kept only when its key
is the thread's (and, for events, when its type is one the caller asked for,
told by the ``agui-event-type`` header before the value is parsed): reading
the whole partition first and filtering afterwards held every other thread's
records too, and parsed them on the event loop. A consumer service asked
for the audit trail of a thread on a partition of a million events went
from 106 MB to 2.96 GB and froze for 11 s, long enough to lose its group
membership (found by probing). A caller that needs every event of a long
thread (a transcript) passes ``fold`` and folds them a batch at a time, parsed
and folded in a worker thread, instead of holding them. ``stop`` ends the read
early (a command's Ctrl-C); ``progress`` hears how far each partition is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from contracts import ThreadState
from contracts.headers import EVENT_TYPE, RUN_ID, SEQ
from services.kafka.reader import Start, TopicReader
from services.kafka.records import Deduper, OpsRecord, from_kafka, latest_states
from services.runtime.settings import KafkaSettings

__all__ = ["BOUNDARIES", "Fold", "Progress", "ReadStoppedError", "ThreadRecords", "read_state",
           "read_thread"]

BOUNDARIES = frozenset({"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR"})
"""The events an audit trail or a run summary of outcomes needs: a run's start and end."""

Progress = Callable[[str, int, int], None]
"""``(topic, records read of the thread's partition, records in it)``, after each batch."""


class ReadStoppedError(Exception):
    """The read was stopped (``stop`` set) before it reached the partition's end."""


@dataclass
class ThreadRecords:
    """What the topics hold about one thread."""

    thread_id: str
    state: ThreadState | None
    events: list[OpsRecord] = field(default_factory=list)
    decisions: list[OpsRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    run_events: dict[str, int] = field(default_factory=dict)
    """Each run's events read (copies dropped), kept in ``events`` or not."""


Fold = Callable[[list[OpsRecord]], None]
"""Hears a batch of the thread's events at a time, in order, copies dropped; it is run in
a worker thread (``asyncio.to_thread``), batch after batch, never two at once."""


@dataclass
class _Reading:
    """One thread's keyed read of one topic: what is kept, who folds the events."""

    topic: str
    key: str
    types: Collection[str] | None = None
    fold: Fold | None = None
    deduper: Deduper | None = None
    kept: list[OpsRecord] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def _wanted(self, record: Any) -> bool:
        if self.types is None:
            return True
        kind = next((v for k, v in record.headers or () if k == EVENT_TYPE), None)
        return kind is not None and kind.decode("utf-8", "replace") in self.types

    def absorb(self, records: list[Any], settings: KafkaSettings) -> None:
        """The thread's records of one batch: copies dropped and each run's events counted
        by their headers; a record parsed only if kept or folded."""
        folded: list[OpsRecord] = []
        for record in records:
            if self.deduper is not None:
                marks = {k: v.decode("utf-8", "replace") for k, v in record.headers or ()
                         if k in (RUN_ID, SEQ) and v is not None}
                run = marks.get(RUN_ID)
                if not self.deduper.fresh_ids(self.key, run, marks.get(SEQ)):
                    continue
                if run is not None:
                    self.counts[run] = self.counts.get(run, 0) + 1
            kept = self._wanted(record)
            if not kept and self.fold is None:
                continue  # not even parsed
            rec = from_kafka(record, settings.topics)
            if kept:
                self.kept.append(rec)
            if self.fold is not None:
                folded.append(rec)
        if self.fold is not None and folded:
            self.fold(folded)


async def _read(reader: TopicReader, reading: _Reading, settings: KafkaSettings, *,
                stop: asyncio.Event | None, progress: Progress | None) -> list[OpsRecord]:
    tp = await reader.key_partition(reading.topic, reading.key)
    ends = await reader.assign([tp], Start.beginning())
    raw_key = reading.key.encode()
    first: int | None = None
    async for batch in reader.batches(until=ends, stop=stop):
        if first is None and batch:
            first = batch[0].offset
        mine = [record for record in batch if record.key == raw_key]
        if mine and reading.fold is not None:  # parsing and folding off the loop
            await asyncio.to_thread(reading.absorb, mine, settings)
        elif mine:
            reading.absorb(mine, settings)
        if progress is not None and batch:
            progress(reading.topic, batch[-1].offset + 1 - (first or 0),
                     ends.get(tp, 0) - (first or 0))
        await asyncio.sleep(0)  # a long partition never holds the loop past a batch
    if stop is not None and stop.is_set():
        raise ReadStoppedError(f"stopped while reading {reading.topic}")
    return reading.kept


async def read_state(settings: KafkaSettings, thread_id: str, *,
                     stop: asyncio.Event | None = None) -> ThreadState | None:
    """The thread's live state on the compacted ``threads`` topic, if any."""
    async with TopicReader(settings, "agui-relay-ops") as reader:
        records = await _read(reader, _Reading(settings.topics.threads, thread_id), settings,
                              stop=stop, progress=None)
    return latest_states(records)[0].get(thread_id)


async def read_thread(settings: KafkaSettings, thread_id: str, *, decisions: bool = True,
                      event_types: Collection[str] | None = None,
                      fold: Fold | None = None,
                      stop: asyncio.Event | None = None,
                      progress: Progress | None = None) -> ThreadRecords:
    """The thread's state, its events (copies dropped; only ``event_types`` kept when
    given, every one handed to ``fold`` in order) and its decisions."""
    topics = settings.topics
    async with TopicReader(settings, "agui-relay-ops") as reader:
        states, warnings = latest_states(await _read(
            reader, _Reading(topics.threads, thread_id), settings, stop=stop,
            progress=progress))
        events = _Reading(topics.events, thread_id, event_types, fold, Deduper())
        await _read(reader, events, settings, stop=stop, progress=progress)
        found = (await _read(reader, _Reading(topics.decisions, thread_id), settings,
                             stop=stop, progress=progress) if decisions else [])
    return ThreadRecords(thread_id, states.get(thread_id), events.kept, found, warnings,
                         events.counts)
