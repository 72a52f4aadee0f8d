"""Closing the runs a lost worker left open, so no thread stays running.

When a worker gets a partition, the checkpoints it restores may hold runs
still marked active by a worker that died. For each such run of its agent:

1. it reads the thread's ``events`` and ``runs`` partitions from shortly
   before the run's start marker (``AGUI_RECOVERY_MARGIN_S``) up to their
   current ends, and finds the run's records by their run-id header: on
   ``events`` the highest sequence number and a terminal event, on ``runs``
   its boundary records;
2. ``reconcile`` says what to write so that the run's end is on both topics,
   the same way: nothing when it is on both; the end (and what else
   ``events`` lacks) copied from ``runs`` to ``events`` when the worker died
   between the two writes of its end; the end copied to ``runs`` when only
   ``events`` has it (a worker of an earlier version); else a ``RUN_ERROR``
   with code ``worker_lost``, numbered after the last record found
   (``RUN_ERROR`` implicitly ends whatever the run had open) — preceded by
   the run's ``RUN_STARTED`` (without the input echo, which only the dead
   worker had) when nothing of the run was published at all, so every run's
   stream opens the same way — written to ``runs`` first, then ``events``
   (nothing, when those records would not fit: ids an older version let
   through; nor when the broker refuses one for its size, a topic's
   ``max.message.bytes`` lowered under ``AGUI_MAX_RECORD_BYTES``: the run is
   ``unclosable``, logged);
3. the checkpoint records the run as closed; what stays open is what the
   terminal event found asked for (an interrupt outcome), else what the
   start marker kept open — interrupts a run never delivered were never
   open for anyone. A checkpoint that would not fit is not written (the
   run is closed on the topics all the same; its next run replaces the mark).

The redelivered dispatch of such a run is then skipped as closed: a run is
never executed twice, and an approved side effect it began is recorded in
the thread's ledger (``effects``), never repeated. Recovery dying half way
leaves a state step 2 covers: the next owner finishes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import orjson
from ag_ui.core import PROTOCOL_VERSION, BaseEvent, Interrupt, RunErrorEvent, RunStartedEvent

from contracts import EventHeaders
from contracts.headers import EVENT_TYPE, RUN_ID, SEQ, ascii_int, header_value
from services.kafka.clients import AIOKafkaProducer
from services.kafka.reader import Start, TopicReader
from services.kafka.size_refusals import TOO_LARGE
from services.producer import checkpoint as cp
from services.producer.errors import RecordTooLargeError
from services.producer.publish import event_bytes, send_event
from services.producer.reconcile import Found, Plan, Trace, reconcile
from services.producer.store import Change, CheckpointStore
from services.runtime import metrics
from services.runtime.logging import run_fields
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

LOST_MESSAGE = "the worker running this run was lost before the run finished"


@dataclass
class RunTrace:
    """What ``events`` and ``runs`` hold of one run."""

    events: Trace = field(default_factory=Trace)
    runs: Trace = field(default_factory=Trace)


@dataclass(frozen=True, slots=True)
class Recovered:
    """How one left-open run was closed."""

    thread_id: str
    run_id: str
    action: str
    """``worker_lost``, ``found_closed`` when its terminal event was already written,
    ``completed`` when it was on ``runs`` only (copied to ``events``), or ``unclosable``
    when its RUN_ERROR would not fit a record."""


RunKey = tuple[str, str]
"""(threadId, runId): a run id names a run within its thread only."""


async def trace_runs(settings: KafkaSettings, runs: Iterable[RunKey],
                     since: datetime) -> dict[RunKey, RunTrace]:
    """Scan the ``events`` and ``runs`` partitions of ``runs`` from ``since``; a record is a
    run's when its key is the run's thread and its header the run's id. By the header
    alone, two threads' ``r1`` were one run: a lost worker's thread got another thread's
    end copied onto its stream (another tenant's, perhaps) and stayed running for good
    (found by review)."""
    topics = settings.topics
    traces = {(thread_id.encode(), run_id): RunTrace() for thread_id, run_id in runs}
    async with TopicReader(settings, "agui-relay-producer-recovery") as reader:
        partitions = {await reader.key_partition(topic, key.decode())
                      for topic in (topics.events, topics.runs) for key, _ in traces}
        records = await reader.read_all(sorted(partitions, key=lambda tp: (tp.topic,
                                                                           tp.partition)),
                                        Start.at(int(since.timestamp() * 1000)))
    for record in records:
        trace = traces.get((record.key or b"", header_value(record.headers, RUN_ID) or ""))
        seq = ascii_int(header_value(record.headers, SEQ))
        if trace is None or seq is None:
            continue
        found = Found(seq, header_value(record.headers, EVENT_TYPE) or "",
                      record.value or b"", tuple(record.headers or ()))
        on_runs = record.topic == topics.runs
        (trace.runs if on_runs else trace.events).add(found, keep=on_runs)
    return {(key.decode(), run_id): trace for (key, run_id), trace in traces.items()}


def _open_after_terminal(terminal: Found) -> list[Interrupt] | None:
    """The interrupts an already-published interrupt outcome left open."""
    body = orjson.loads(terminal.value)
    outcome = body.get("outcome") if body.get("type") == "RUN_FINISHED" else None
    if isinstance(outcome, dict) and outcome.get("type") == "interrupt":
        return [Interrupt.model_validate(i) for i in outcome.get("interrupts", [])]
    return None


def closer(run_id: str, open_after: list[Interrupt] | None, now: datetime) -> Change:
    """The checkpoint change recording ``run_id`` as closed."""
    return lambda c: cp.end_run(c, run_id=run_id, open_after=open_after, now=now)


async def recover(store: CheckpointStore, producer: AIOKafkaProducer, agent: str,
                  stale: list[cp.ThreadCheckpoint], *, margin_s: float,
                  clock: Callable[[], datetime]) -> list[Recovered]:
    """Close every run in ``stale`` (checkpoints whose ``active`` is set)."""
    actives = {c.thread_id: c.active for c in stale if c.active is not None}
    if not actives:
        return []
    since = min(a.started_at for a in actives.values()) - timedelta(seconds=margin_s)
    traces = await trace_runs(store.settings, [(t, a.run_id) for t, a in actives.items()],
                              since)
    done: list[Recovered] = []
    for thread_id, active in actives.items():
        trace = traces[(thread_id, active.run_id)]
        fields = run_fields(thread_id, active.run_id, active.request_id)
        plan = reconcile(trace.events, trace.runs)
        action: str = plan.action
        open_after = _open_after_terminal(plan.end) if plan.end is not None else None
        try:
            await _write(store, producer, thread_id, plan,
                         _lost(thread_id, active.run_id, agent, plan, clock)
                         if plan.lost_from is not None
                         else [])
        except RecordTooLargeError as exc:  # ids an older version let through
            action = "unclosable"
            log.error("run %s cannot be closed on events: %s", active.run_id,
                      exc.message, extra=fields)
        if plan.action == "worker_lost":
            metrics.run_finished(agent, "worker_lost")
        try:
            await store.update(thread_id, closer(active.run_id, open_after, clock()))
        except RecordTooLargeError as exc:  # its events are closed; the marker stays
            log.error("run %s closed on events, but its checkpoint cannot record it: %s",
                      active.run_id, exc.message, extra=fields)
        log.warning("closed run %s left open by worker %s: %s", active.run_id, active.worker,
                    action, extra=fields)
        done.append(Recovered(thread_id, active.run_id, action))
    return done


def _lost(thread_id: str, run_id: str, agent: str, plan: Plan,
          clock: Callable[[], datetime]) -> list[Found]:
    """The records closing a run nothing ended: RUN_ERROR, after a RUN_STARTED if need be."""
    thread_events: list[BaseEvent] = [RunErrorEvent(message=LOST_MESSAGE, code="worker_lost")]
    if plan.with_start:
        thread_events.insert(0, RunStartedEvent(thread_id=thread_id, run_id=run_id,
                                                protocol_version=PROTOCOL_VERSION))
    first = plan.lost_from or 0
    return [Found(first + i, e.type.value, event_bytes(e, clock),
                  tuple(EventHeaders(run_id, e.type.value, agent, first + i).encode()))
            for i, e in enumerate(thread_events)]


async def _write(store: CheckpointStore, producer: AIOKafkaProducer, thread_id: str,
                 plan: Plan, lost: list[Found]) -> None:
    """``plan``'s records: to ``runs`` first and acknowledged, then to ``events``."""
    topics = store.settings.topics
    for f in lost:  # nothing is sent unless every new record fits
        store.guard.check(f"{f.event_type} #{f.seq}", "event_too_large", thread_id.encode(),
                          f.value, list(f.headers))
    for topic, records in ((topics.runs, [*plan.to_runs, *lost]),
                           (topics.events, [*plan.to_events, *lost])):
        sent = [await send_event(producer, topic, thread_id, f.headers, f.value, store.guard)
                for f in records]
        try:
            await asyncio.gather(*sent)
        except TOO_LARGE as exc:  # the topic takes less than AGUI_MAX_RECORD_BYTES
            big = max(records, key=lambda f: len(f.value))
            raise store.guard.refused_by_broker(
                f"the run's {big.event_type} #{big.seq}", topic, "event_too_large",
                thread_id.encode(), big.value, list(big.headers)) from exc
