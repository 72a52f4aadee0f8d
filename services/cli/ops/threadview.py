"""Threads as an operator sees them: table rows, run summaries.

The compacted ``threads`` topic holds one live ``ThreadState`` per thread,
but until the log cleaner runs it may still hold older ones, and a ``null``
value (tombstone) deletes a thread: ``services.kafka.records.latest_states``
keeps the last record per key. ``ThreadRow`` is what the ``threads`` table shows (status, agent,
open interrupts, oldest expiry, last activity, and the parent of a
delegation's child thread, where its interrupts are answered) and
``select`` applies its filters. ``summarize_runs`` turns a thread's events into one line per run
(agent, start, end, outcome, interrupts) for ``threads show``, and
``run_ending`` finds a run's terminal event among them, as the consumer
service's ``catchup`` reads one (``threads show`` never prints a state from
before an end it has read). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson

from contracts import ThreadState
from contracts.headers import AGENT, EVENT_TYPE, RUN_ID
from contracts.records import parent_thread
from services.agui.expiry import read_expiry
from services.consumer.catchup import Ending
from services.kafka.records import OpsRecord


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """One line of the ``threads`` table."""

    thread_id: str
    status: str
    agent: str | None
    run_id: str | None
    open_interrupts: tuple[str, ...]
    oldest_expiry: str | None
    """The ``expiresAt`` text of the open interrupt that expires first."""
    expired: tuple[str, ...]
    """The open interrupts already expired."""
    last_activity: datetime | None
    child_of: str | None = None
    """The parent thread of a delegation's child thread (its interrupts are answered
    there, carried up); None for a thread a client started."""

    def to_json(self) -> dict[str, object]:
        return {
            "threadId": self.thread_id,
            "status": self.status,
            "agent": self.agent,
            "runId": self.run_id,
            "openInterrupts": list(self.open_interrupts),
            "oldestExpiry": self.oldest_expiry,
            "expired": list(self.expired),
            "lastActivity": self.last_activity.isoformat() if self.last_activity else None,
            "childOf": self.child_of,
        }


def row_of(state: ThreadState, now: datetime) -> ThreadRow:
    """The table row for one thread."""
    timed = []
    expired = []
    for opened in state.open_interrupts:
        expiry = read_expiry(opened.interrupt.expires_at)
        if expiry.epoch_ms is not None:
            timed.append((expiry.epoch_ms, opened.interrupt.expires_at))
        if expiry.is_expired(now):
            expired.append(opened.interrupt.id)
    return ThreadRow(
        thread_id=state.thread_id,
        status=state.status,
        agent=state.agent,
        run_id=state.run_id,
        open_interrupts=tuple(o.interrupt.id for o in state.open_interrupts),
        oldest_expiry=min(timed)[1] if timed else None,
        expired=tuple(expired),
        last_activity=state.updated_at,
        child_of=parent_thread(state.thread_id) if state.parent_run_id is not None else None,
    )


def select(
    rows: Iterable[ThreadRow],
    *,
    status: str | None = None,
    expired: bool = False,
    agent: str | None = None,
) -> list[ThreadRow]:
    """Rows passing the filters, most recently active first."""
    kept = [r for r in rows
            if (status is None or r.status == status)
            and (not expired or r.expired)
            and (agent is None or r.agent == agent)]
    oldest = datetime.min.replace(tzinfo=UTC)
    return sorted(kept, key=lambda r: r.last_activity or oldest, reverse=True)


@dataclass
class RunSummary:
    """One run of a thread, from its events."""

    run_id: str
    agent: str | None = None
    parent_run_id: str | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    outcome: str = "open"
    """``success``, ``interrupt``, ``cancelled``, ``error: CODE`` or ``open``."""
    interrupt_ids: list[str] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)
    """The resume entries it started with, as ``id=status``."""
    events: int = 0


def _finish(summary: RunSummary, rec: OpsRecord, kind: str) -> None:
    body = rec.fields
    if kind == "RUN_FINISHED":
        outcome = body.get("outcome") if isinstance(body.get("outcome"), dict) else {}
        assert isinstance(outcome, dict)
        summary.outcome = str(outcome.get("type", "success"))
        summary.interrupt_ids = [str(i.get("id")) for i in outcome.get("interrupts") or []
                                 if isinstance(i, dict)]
    elif summary.outcome in ("open", "success", "interrupt", "cancelled"):
        late = summary.outcome if summary.outcome != "open" else ""
        code = body.get("code") or "error"
        summary.outcome = f"error: {code}" + (f" (after {late})" if late else "")
    summary.ended_ms = rec.timestamp_ms


def summarize_runs(events: Iterable[OpsRecord], counts: Mapping[str, int] | None = None
                   ) -> list[RunSummary]:
    """One summary per run id, in the order the runs started. ``counts``: each run's
    events, when ``events`` holds only some of them (a run's start and end)."""
    runs: dict[str, RunSummary] = {}
    for rec in events:
        body = rec.fields
        run_id = rec.headers.get(RUN_ID) or body.get("runId")
        if not isinstance(run_id, str):
            continue
        summary = runs.setdefault(run_id, RunSummary(run_id))
        summary.events = counts.get(run_id, 0) if counts is not None else summary.events + 1
        summary.agent = summary.agent or rec.headers.get(AGENT)
        kind = rec.headers.get(EVENT_TYPE) or body.get("type")
        if kind == "RUN_STARTED":
            summary.started_ms = rec.timestamp_ms
            summary.parent_run_id = body.get("parentRunId")
            given = body.get("input") if isinstance(body.get("input"), dict) else {}
            assert isinstance(given, dict)
            summary.resume = [f"{e.get('interruptId')}={e.get('status')}"
                              for e in given.get("resume") or [] if isinstance(e, dict)]
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            _finish(summary, rec, kind)
    return list(runs.values())


def run_ending(events: Iterable[OpsRecord], run_id: str) -> Ending | None:
    """The first ``RUN_FINISHED`` or ``RUN_ERROR`` of ``run_id`` among a thread's events."""
    for rec in events:
        kind = rec.headers.get(EVENT_TYPE)
        if rec.headers.get(RUN_ID) == run_id and kind in ("RUN_FINISHED", "RUN_ERROR"):
            raw = rec.value if isinstance(rec.value, str) else orjson.dumps(rec.value)
            value = raw.encode("utf-8") if isinstance(raw, str) else raw
            return Ending(run_id, kind, rec.headers.get(AGENT) or "", rec.offset, value)
    return None
