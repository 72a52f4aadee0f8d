"""Closing the runs a lost worker left open, so no thread stays running.

When a worker gets a partition, the checkpoints it restores may hold runs
still marked active by a worker that died. For each such run of its agent:

1. it reads the thread's ``events`` partition from shortly before the run's
   start marker (``AGUI_RECOVERY_MARGIN_S``) up to the current end, and
   finds the run's records by their run-id header: the highest sequence
   number, and whether a terminal event is already there;
2. if a terminal event is there (the worker died after publishing it and
   before its end marker), nothing is published; else a ``RUN_ERROR`` with
   code ``worker_lost`` is published, numbered after the last record found
   (``RUN_ERROR`` implicitly ends whatever the run had open) — preceded by
   the run's ``RUN_STARTED`` (without the input echo, which only the dead
   worker had) when nothing of the run was published at all, so every run's
   stream opens the same way (nothing, when those records would not fit:
   ids an older version let through; the run is ``unclosable``, logged);
3. the checkpoint records the run as closed; what stays open is what the
   terminal event found asked for (an interrupt outcome), else what the
   start marker kept open — interrupts a run never delivered were never
   open for anyone. A checkpoint that would not fit is not written (the
   run is closed on ``events`` all the same; its next run replaces the mark).

The redelivered dispatch of such a run is then skipped as closed: a run is
never executed twice, and an approved side effect it began is recorded in
the thread's ledger (``effects``), never repeated.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from ag_ui.core import PROTOCOL_VERSION, BaseEvent, Interrupt, RunErrorEvent, RunStartedEvent

from contracts import EventHeaders
from contracts.headers import EVENT_TYPE, RUN_ID, SEQ, header_value
from services.kafka.clients import AIOKafkaProducer
from services.kafka.reader import Start, TopicReader
from services.producer import checkpoint as cp
from services.producer.errors import RecordTooLargeError
from services.producer.publish import event_bytes, send_event
from services.producer.store import Change, CheckpointStore
from services.runtime import metrics
from services.runtime.logging import run_fields
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

TERMINAL_TYPES = ("RUN_FINISHED", "RUN_ERROR")
LOST_MESSAGE = "the worker running this run was lost before the run finished"


@dataclass
class RunTrace:
    """What the events topic holds of one run."""

    last_seq: int = -1
    terminal: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Recovered:
    """How one left-open run was closed."""

    thread_id: str
    run_id: str
    action: str
    """``worker_lost``, ``found_closed`` when its terminal event was already written, or
    ``unclosable`` when its RUN_ERROR would not fit a record."""


async def trace_runs(settings: KafkaSettings, runs: dict[str, str],
                     since: datetime) -> dict[str, RunTrace]:
    """Scan the events partitions of ``runs`` ({run id: thread id}) from ``since``."""
    topic = settings.topics.events
    traces = {run_id: RunTrace() for run_id in runs}
    async with TopicReader(settings, "agui-relay-producer-recovery") as reader:
        partitions = {await reader.key_partition(topic, t) for t in runs.values()}
        records = await reader.read_all(sorted(partitions, key=lambda tp: tp.partition),
                                        Start.at(int(since.timestamp() * 1000)))
    for record in records:
        trace = traces.get(header_value(record.headers, RUN_ID) or "")
        if trace is None:
            continue
        seq = header_value(record.headers, SEQ)
        if seq is not None and seq.isdigit():
            trace.last_seq = max(trace.last_seq, int(seq))
        if header_value(record.headers, EVENT_TYPE) in TERMINAL_TYPES:
            trace.terminal = orjson.loads(record.value)
    return traces


def _open_after_terminal(terminal: dict[str, Any]) -> list[Interrupt] | None:
    """The interrupts an already-published interrupt outcome left open."""
    outcome = terminal.get("outcome") if terminal.get("type") == "RUN_FINISHED" else None
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
    traces = await trace_runs(store.settings, {a.run_id: t for t, a in actives.items()}, since)
    topic = store.settings.topics.events
    done: list[Recovered] = []
    for thread_id, active in actives.items():
        trace = traces[active.run_id]
        fields = run_fields(thread_id, active.run_id, active.request_id)
        open_after: list[Interrupt] | None = None
        if trace.terminal is not None:
            action = "found_closed"
            open_after = _open_after_terminal(trace.terminal)
        else:
            action = "worker_lost"
            events: list[BaseEvent] = [RunErrorEvent(message=LOST_MESSAGE, code="worker_lost")]
            if trace.last_seq < 0:
                events.insert(0, RunStartedEvent(thread_id=thread_id, run_id=active.run_id,
                                                 protocol_version=PROTOCOL_VERSION))
            try:
                sent = [await send_event(producer, topic, thread_id,
                                         EventHeaders(active.run_id, e.type.value, agent,
                                                      trace.last_seq + 1 + i),
                                         event_bytes(e, clock), store.guard)
                        for i, e in enumerate(events)]
            except RecordTooLargeError as exc:  # ids an older version let through
                action = "unclosable"
                log.error("run %s cannot be closed on events: %s", active.run_id,
                          exc.message, extra=fields)
            else:
                await asyncio.gather(*sent)
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
