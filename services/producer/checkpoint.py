"""The producer's checkpoint of one thread, and how each step of a run changes it — pure.

One record per thread on the compacted ``checkpoints`` topic (key threadId)
is what a worker remembers across runs and across its own death:

* ``open_interrupts`` — the interrupts this runtime raised on the thread and
  nobody answered yet. They decide which resume entries are recognised and
  which open interrupts are uncovered. While a run is active they are the
  ones that stay open if that run fails (its answered interrupts are
  consumed when it starts, as the gatekeeper consumes them on admission).
* ``active`` — the run in progress: a *start marker* written (and
  acknowledged) before its RUN_STARTED is published, cleared by the *end
  marker* written once its terminal event is acknowledged. A worker taking
  over a partition finds every run whose start marker is still there and
  closes it (``recovery``).
* ``closed_runs`` — recent run ids whose terminal event is written, so a
  redelivered dispatch is not run again.
* ``executions`` — side effects begun or done, by key (``effects``).

The records are plain pydantic models serialised by pydantic-core alone
(camelCase, no ``null``): a worker writes two per run, so they must cost
microseconds, not the AG-UI base model's per-object Python hooks. The
functions below return a new record; no I/O, no clock (``now`` is passed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from ag_ui.core import Interrupt
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from contracts import DecodeError
from contracts.codec import validation_detail
from contracts.records import OpenInterrupt

MAX_CLOSED_RUNS = 64
MAX_EXECUTIONS = 256


class Record(BaseModel):
    """Base of the checkpoint records: camelCase on the wire, unknown members ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Execution(Record):
    """One side effect begun (and maybe finished) on the thread."""

    key: str
    run_id: str
    status: Literal["started", "done"]
    result: Any = None
    at: datetime


class ActiveRun(Record):
    """A run that started and has not been recorded as closed."""

    run_id: str
    request_id: str
    agent: str
    worker: str
    started_at: datetime


class ThreadCheckpoint(Record):
    """Everything the producer runtime remembers about one thread."""

    schema_version: Literal[1] = 1
    thread_id: str
    agent: str | None = None
    open_interrupts: list[OpenInterrupt] = Field(default_factory=list)
    active: ActiveRun | None = None
    closed_runs: list[str] = Field(default_factory=list)
    executions: list[Execution] = Field(default_factory=list)
    updated_at: datetime | None = None


def to_bytes(checkpoint: ThreadCheckpoint) -> bytes:
    """The record's value on the checkpoints topic."""
    return checkpoint.__pydantic_serializer__.to_json(checkpoint, by_alias=True,
                                                      exclude_none=True)


def from_bytes(data: bytes) -> ThreadCheckpoint:
    """Read a record back (``DecodeError`` when it is not one)."""
    try:
        return ThreadCheckpoint.model_validate_json(data)
    except ValidationError as exc:
        raise DecodeError("schema_invalid", detail=validation_detail(exc)) from exc


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


def end_run(cp: ThreadCheckpoint, *, run_id: str, open_after: Sequence[Interrupt] | None,
            now: datetime) -> ThreadCheckpoint:
    """The run's terminal event is written: forget it as active, remember it as closed.

    ``open_after`` None keeps what the start marker said stays open (the run
    failed or was cancelled, or never delivered what it raised).
    """
    active = cp.active if cp.active is not None and cp.active.run_id == run_id else None
    still = (_attributed(cp, open_after, run_id) if open_after is not None
             else list(cp.open_interrupts))
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
