"""The producer's checkpoint of one thread, and how each step of a run changes it — pure.

One record per thread on the compacted ``checkpoints`` topic (key threadId)
is what a worker remembers across runs and across its own death:

* ``open_interrupts`` — the interrupts this runtime raised on the thread and
  nobody answered yet. They decide which resume entries are recognised and
  which open interrupts are uncovered. While a run is active they are the
  ones that stay open if that run fails (its answered interrupts are
  consumed when it starts, as the gatekeeper consumes them on admission).
* ``active`` — the run in progress: a *start marker* written before its
  RUN_STARTED is published, and a *closing marker* (the terminal event's
  bytes and sequence number, and what stays open after it) written after the
  run's other events are acknowledged and before its terminal event is
  published. A worker taking over a partition finds every run whose marker
  is still there and closes it (``recovery``).
* ``closed_runs`` — recent run ids whose terminal event is written, so a
  redelivered dispatch is not run again.
* ``executions`` — side effects begun or done, by key (``effects``).

The functions below return a new record; no I/O, no clock (``now`` is passed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from ag_ui.core import Interrupt
from pydantic import Field

from contracts.records import Envelope, OpenInterrupt

MAX_CLOSED_RUNS = 64
MAX_EXECUTIONS = 256


class Execution(Envelope):
    """One side effect begun (and maybe finished) on the thread."""

    key: str
    run_id: str
    status: Literal["started", "done"]
    result: Any = None
    at: datetime


class Closing(Envelope):
    """The terminal event a run is about to publish, kept so recovery can finish the job."""

    seq: int
    terminal: dict[str, Any]
    """The terminal event's wire JSON, published again verbatim (same seq) if needed."""
    outcome: str
    open_interrupts: list[OpenInterrupt] = Field(default_factory=list)


class ActiveRun(Envelope):
    """A run that started and has not been recorded as closed."""

    run_id: str
    request_id: str
    agent: str
    worker: str
    started_at: datetime
    closing: Closing | None = None


class ThreadCheckpoint(Envelope):
    """Everything the producer runtime remembers about one thread."""

    thread_id: str
    agent: str | None = None
    open_interrupts: list[OpenInterrupt] = Field(default_factory=list)
    active: ActiveRun | None = None
    closed_runs: list[str] = Field(default_factory=list)
    executions: list[Execution] = Field(default_factory=list)
    updated_at: datetime | None = None


def fresh(thread_id: str) -> ThreadCheckpoint:
    """A thread this runtime never ran."""
    return ThreadCheckpoint(thread_id=thread_id)


def open_interrupts(cp: ThreadCheckpoint) -> list[Interrupt]:
    """The interrupts raised on the thread and still unanswered."""
    return [o.interrupt for o in cp.open_interrupts]


def has_closed(cp: ThreadCheckpoint, run_id: str) -> bool:
    """True when ``run_id``'s terminal event was written (recently enough to remember)."""
    return run_id in cp.closed_runs


def _attributed(cp: ThreadCheckpoint, interrupts: Iterable[Interrupt],
                run_id: str) -> list[OpenInterrupt]:
    """Open interrupts, each with the run that raised it (kept for carried ones)."""
    raised_by = {o.interrupt.id: o.run_id for o in cp.open_interrupts}
    return [OpenInterrupt(run_id=raised_by.get(i.id, run_id), interrupt=i) for i in interrupts]


def begin_run(cp: ThreadCheckpoint, *, run_id: str, request_id: str, agent: str, worker: str,
              still_open: Sequence[Interrupt], now: datetime) -> ThreadCheckpoint:
    """The start marker: ``run_id`` is running; ``still_open`` stay open if it fails."""
    return cp.model_copy(update={
        "agent": agent,
        "open_interrupts": _attributed(cp, still_open, run_id),
        "active": ActiveRun(run_id=run_id, request_id=request_id, agent=agent, worker=worker,
                            started_at=now),
        "updated_at": now,
    })


def mark_closing(cp: ThreadCheckpoint, *, run_id: str, seq: int, terminal: dict[str, Any],
                 outcome: str, open_after: Sequence[Interrupt],
                 now: datetime) -> ThreadCheckpoint:
    """The closing marker: the terminal event about to be published, and what stays open."""
    active = cp.active
    if active is None or active.run_id != run_id:
        raise ValueError(f"run {run_id!r} is not the thread's active run")
    closing = Closing(seq=seq, terminal=terminal, outcome=outcome,
                      open_interrupts=_attributed(cp, open_after, run_id))
    return cp.model_copy(update={"active": active.model_copy(update={"closing": closing}),
                                 "updated_at": now})


def end_run(cp: ThreadCheckpoint, *, run_id: str, open_after: Sequence[Interrupt] | None,
            now: datetime) -> ThreadCheckpoint:
    """The run's terminal event is written: forget it as active, remember it as closed.

    ``open_after`` None keeps what the closing marker (or, without one, the
    start marker) said stays open.
    """
    active = cp.active if cp.active is not None and cp.active.run_id == run_id else None
    if open_after is not None:
        still = _attributed(cp, open_after, run_id)
    elif active is not None and active.closing is not None:
        still = list(active.closing.open_interrupts)
    else:
        still = list(cp.open_interrupts)
    closed = [r for r in cp.closed_runs if r != run_id] + [run_id]
    return cp.model_copy(update={
        "open_interrupts": still,
        "active": None if active is not None else cp.active,
        "closed_runs": closed[-MAX_CLOSED_RUNS:],
        "updated_at": now,
    })


def execution(cp: ThreadCheckpoint, key: str) -> Execution | None:
    """What the thread's ledger holds for side effect ``key``."""
    for item in cp.executions:
        if item.key == key:
            return item
    return None


def _with_execution(cp: ThreadCheckpoint, item: Execution, now: datetime) -> ThreadCheckpoint:
    kept = [e for e in cp.executions if e.key != item.key] + [item]
    return cp.model_copy(update={"executions": kept[-MAX_EXECUTIONS:], "updated_at": now})


def effect_started(cp: ThreadCheckpoint, *, key: str, run_id: str,
                   now: datetime) -> ThreadCheckpoint:
    """Side effect ``key`` is about to happen (recorded before it does)."""
    return _with_execution(cp, Execution(key=key, run_id=run_id, status="started", at=now), now)


def effect_done(cp: ThreadCheckpoint, *, key: str, result: Any,
                now: datetime) -> ThreadCheckpoint:
    """Side effect ``key`` happened, with ``result``."""
    before = execution(cp, key)
    run_id = before.run_id if before is not None else ""
    return _with_execution(cp, Execution(key=key, run_id=run_id, status="done", result=result,
                                         at=now), now)
