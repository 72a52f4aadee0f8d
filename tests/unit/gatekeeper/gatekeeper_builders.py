"""Builders for gatekeeper tests: requests, interrupts, boundaries and threads.

Everything takes keyword overrides and defaults to one thread ``t1`` on agent
``scripted`` at a fixed ``NOW``, so a test states only what it is about.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ag_ui.core import (
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunFinishedCancelledOutcome,
    RunFinishedInterruptOutcome,
    RunFinishedOutcome,
    RunFinishedSuccessOutcome,
    UserMessage,
)

from contracts import RunRequest, ThreadState
from contracts.records import RequestPolicy
from services.gatekeeper.rules import Policy, decide, on_boundary
from services.gatekeeper.thread import Boundary, fresh

NOW = datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)
"""The clock of every decision in these tests (with milliseconds, to test them)."""
ENTROPY = os.urandom
"""The trace-id entropy a ``Batch`` is given in these tests (as the processor gives it)."""
THREAD = "t1"
AGENT = "scripted"
REJECT = Policy()
ENQUEUE = Policy(busy="enqueue", queue_limit=2)
LENIENT = Policy(unknown_entry="lenient")


def iso(moment: datetime) -> str:
    """``moment`` as the ISO 8601 form JavaScript's toISOString() writes."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.microsecond // 1000:03d}Z"
    )


def interrupt(iid: str, *, expires_at: str | None = None, **extra: Any) -> Interrupt:
    """An interrupt waiting for approval, optionally expiring."""
    return Interrupt(id=iid, reason="tool_approval", expires_at=expires_at, **extra)


def expiring(iid: str, delta: timedelta) -> Interrupt:
    """An interrupt whose expiresAt is ``NOW + delta`` in toISOString() form."""
    return interrupt(iid, expires_at=iso(NOW + delta))


def entry(iid: str, status: Literal["resolved", "cancelled"] = "resolved") -> ResumeEntry:
    """One resume entry (a resolved one carries an approval payload)."""
    payload = {"approved": True} if status == "resolved" else None
    return ResumeEntry(interrupt_id=iid, status=status, payload=payload)


def resolve(*ids: str) -> list[ResumeEntry]:
    """Entries resolving ``ids``."""
    return [entry(i) for i in ids]


def cancel(*ids: str) -> list[ResumeEntry]:
    """Entries cancelling ``ids``."""
    return [entry(i, "cancelled") for i in ids]


def request(
    request_id: str = "q1",
    run_id: str = "r1",
    *,
    thread_id: str = THREAD,
    agent: str = AGENT,
    resume: Iterable[ResumeEntry] | None = None,
    parent_run_id: str | None = None,
    policy: RequestPolicy | None = None,
) -> RunRequest:
    """A RunRequest with one user message (a delegation's child run's: ``parent_run_id``
    and ``policy="delegation"``)."""
    return RunRequest(
        request_id=request_id,
        agent=agent,
        policy=policy,
        input=RunAgentInput(
            thread_id=thread_id,
            run_id=run_id,
            parent_run_id=parent_run_id,
            messages=[UserMessage(id=f"m-{run_id}", role="user", content="go")],
            resume=list(resume) if resume is not None else None,
        ),
        submitted_at=NOW - timedelta(milliseconds=5),
    )


def started(run_id: str) -> Boundary:
    return Boundary("RUN_STARTED", run_id, AGENT)


def finished(run_id: str, outcome: RunFinishedOutcome | None = None) -> Boundary:
    return Boundary("RUN_FINISHED", run_id, AGENT, outcome)


def interrupted_by(run_id: str, *interrupts: Interrupt) -> Boundary:
    return finished(run_id, RunFinishedInterruptOutcome(interrupts=list(interrupts)))


def succeeded(run_id: str) -> Boundary:
    return finished(run_id, RunFinishedSuccessOutcome())


def cancelled_run(run_id: str) -> Boundary:
    return finished(run_id, RunFinishedCancelledOutcome())


def failed(run_id: str) -> Boundary:
    return Boundary("RUN_ERROR", run_id, AGENT)


def running(run_id: str = "r0", *, thread_id: str = THREAD) -> ThreadState:
    """A thread whose run ``run_id`` was admitted and has not closed."""
    outcome = decide(
        fresh(thread_id), request(f"admit-{run_id}", run_id, thread_id=thread_id), NOW, REJECT
    )
    assert outcome.decision.verdict == "admitted"
    return outcome.state


def idle_after(run_id: str = "r0", *, thread_id: str = THREAD) -> ThreadState:
    """A thread whose run ``run_id`` finished with success."""
    state, _ = on_boundary(running(run_id, thread_id=thread_id), succeeded(run_id), NOW, REJECT)
    return state


def interrupted(*interrupts: Interrupt, run_id: str = "r0", thread_id: str = THREAD) -> ThreadState:
    """A thread whose run ``run_id`` ended with ``interrupts`` open."""
    state, _ = on_boundary(
        running(run_id, thread_id=thread_id), interrupted_by(run_id, *interrupts), NOW, REJECT
    )
    assert state.status == "interrupted"
    return state
