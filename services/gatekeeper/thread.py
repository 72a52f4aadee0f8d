"""The thread state machine: what run boundaries on ``events`` do to a thread.

The gatekeeper admits runs itself (see ``rules``), so the event stream only
has to tell it when a run *closes*, and how::

    running --RUN_FINISHED interrupt--------------------> interrupted
    running --RUN_FINISHED success / cancelled / absent--> idle
    running --RUN_ERROR----------------------------------> idle
    interrupted --late RUN_ERROR--> interrupted   (interrupts stay open, as
                                                   the reference client keeps
                                                   ``pendingInterrupts``)

An event counts only for the thread's *current* run, named by the record's
``agui-run-id`` header: ``RUN_ERROR`` carries no runId in its body (digest
A7), and correlating every boundary the same way keeps a duplicate or late
event for an older run from closing a newer one. The one exception is a
``RUN_STARTED`` on an idle thread for a run the thread has never seen (a run
that bypassed the gatekeeper, or state that was lost): the thread is marked
running so nothing is admitted beside it until that run closes.

Memory is bounded: a thread keeps its open interrupts, its current run, the
last ``RECENT_RUNS`` run ids and the last ``RECENT_DECISIONS`` decisions, so
work per event or decision does not grow with a thread's history
(``remembered`` is what a decision leaves, ``replayed`` the same decision
given again to a retried request id). Pure: no
I/O, no clock reads; states are never mutated, a new one is returned.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ag_ui.core import (
    BaseEvent,
    EventType,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedOutcome,
    RunStartedEvent,
)
from pydantic import ValidationError

from contracts import (
    Decision,
    DecodeError,
    EventHeaders,
    OpenInterrupt,
    RememberedDecision,
    RunRequest,
    ThreadState,
)
from contracts.codec import load_json, validation_detail

RECENT_RUNS = 16
"""Run ids a thread remembers (``duplicate_run_id`` looks no further back)."""
RECENT_DECISIONS = 32
"""Decisions a thread remembers (a retried requestId older than this is re-decided)."""
REMEMBERED_IDS = 16
REMEMBERED_TEXT = 300
REMEMBERED_WARNINGS = 4
"""What a remembered decision keeps of its interrupt ids, its message and each warning,
and how many warnings: a rejection names the ids its request sent (up to 256 of 256
characters), and 32 of them filled a thread state to the record limit, so that the
next run's interrupt no longer fit and was dead-lettered while every client had seen it
(found by probing). A retried request id is answered with what was kept."""

BOUNDARY_TYPES = frozenset(
    {EventType.RUN_STARTED.value, EventType.RUN_FINISHED.value, EventType.RUN_ERROR.value}
)
"""The only event types that change a thread; filter on the type header first."""
BOUNDARY_MODELS: dict[str, type[BaseEvent]] = {
    EventType.RUN_STARTED.value: RunStartedEvent,
    EventType.RUN_FINISHED.value: RunFinishedEvent,
    EventType.RUN_ERROR.value: RunErrorEvent,
}
"""The model each boundary's value must validate as."""
SHOWN = 80
"""Characters of an id a reason quotes."""


def fresh(thread_id: str) -> ThreadState:
    """The state of a thread the gatekeeper has never seen: idle, remembering nothing."""
    return ThreadState(thread_id=thread_id)


def knows_run(state: ThreadState, run_id: str) -> bool:
    """True when ``run_id`` is the thread's current or a remembered earlier run."""
    return run_id == state.run_id or run_id in state.recent_run_ids


def remember_run(run_ids: Iterable[str], run_id: str) -> list[str]:
    """``run_ids`` with ``run_id`` appended last, trimmed to ``RECENT_RUNS``."""
    kept = [r for r in run_ids if r != run_id]
    kept.append(run_id)
    return kept[-RECENT_RUNS:]


def remember_decision(
    decisions: Iterable[RememberedDecision], decision: RememberedDecision
) -> list[RememberedDecision]:
    """``decisions`` with ``decision`` last (replacing one for the same requestId), trimmed."""
    kept = [d for d in decisions if d.request_id != decision.request_id]
    kept.append(decision)
    return kept[-RECENT_DECISIONS:]


@dataclass(frozen=True, slots=True)
class Boundary:
    """A run boundary as the gatekeeper reads it from one ``events`` record.

    ``run_id`` and ``agent`` come from the record's headers; ``outcome`` is the
    ``RUN_FINISHED`` outcome (None: absent, i.e. success). Only a record that
    is the event its headers say may become one (``read_boundary``): a run is
    adopted or closed on what a worker wrote, never on headers alone.
    """

    kind: str
    run_id: str
    agent: str
    outcome: RunFinishedOutcome | None = None

    def failed(self) -> Boundary:
        """This boundary's run as if it had ended in ``RUN_ERROR``.

        What a boundary does to a thread must be written as the thread's new
        state; when that state cannot be written (it would outgrow a record),
        the run is closed as failed instead: the thread is never left running
        a run that has ended, and a failure opens nothing.
        """
        return Boundary(EventType.RUN_ERROR.value, self.run_id, self.agent)

    @classmethod
    def of(cls, headers: EventHeaders, event: BaseEvent) -> Boundary | None:
        """The boundary ``event`` marks, or None for any other event."""
        kind = EventType(event.type).value
        if kind not in BOUNDARY_TYPES:
            return None
        outcome = event.outcome if isinstance(event, RunFinishedEvent) else None
        return cls(kind, headers.run_id, headers.agent, outcome)


def read_boundary(
    kind: str, thread_id: str, headers: EventHeaders, value: bytes | None
) -> Boundary | str:
    """The boundary a ``runs`` record of type ``kind`` keyed ``thread_id``
    marks, or why it marks none.

    The value must be one JSON object of type ``kind`` that validates as that event,
    naming the key's thread and the header's run (``RUN_ERROR`` names neither in
    AG-UI 1.0; one that does must name them too). Every worker writes its boundaries
    so, recovery's ``worker_lost`` included; anything else was written by someone
    else, and adopting it could hold the thread running for a run no worker has.
    """
    try:
        doc = load_json(value if value is not None else b"")
    except DecodeError as exc:
        return f"{kind} record's value is not JSON ({exc.detail or exc.reason})"
    if not isinstance(doc, dict) or doc.get("type") != kind:
        found = doc.get("type") if isinstance(doc, dict) else type(doc).__name__
        return f"{kind} record's value is not a {kind} event (found {_shown(found)})"
    try:
        event = BOUNDARY_MODELS[kind].model_validate(doc)
    except ValidationError as exc:
        return f"{kind} record does not validate ({validation_detail(exc)})"
    named = doc.get("threadId", thread_id)
    if named != thread_id:
        return f"{kind} names thread {_shown(named)} but is keyed {_shown(thread_id)}"
    run = doc.get("runId", headers.run_id)
    if run != headers.run_id:
        return (f"{kind} names run {_shown(run)} but its agui-run-id header is "
                f"{_shown(headers.run_id)}")
    outcome = event.outcome if isinstance(event, RunFinishedEvent) else None
    return Boundary(kind, headers.run_id, headers.agent, outcome)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}…"


def apply_event(state: ThreadState, headers: EventHeaders, event: BaseEvent) -> ThreadState:
    """The thread after ``event`` (whose record carried ``headers``).

    Returns ``state`` itself (identity) when the event changes nothing, so a
    caller can tell cheaply whether there is anything to write.
    """
    boundary = Boundary.of(headers, event)
    return state if boundary is None else apply_boundary(state, boundary)


def apply_boundary(
    state: ThreadState, boundary: Boundary, at: datetime | None = None
) -> ThreadState:
    """The thread after ``boundary``; ``state`` itself when nothing changes. ``at``: when
    it is applied (the caller's clock), each interrupt it opens dated so (``opened_at``)."""
    run_id = boundary.run_id
    if boundary.kind == EventType.RUN_STARTED.value:
        return _started(state, run_id, boundary.agent)
    if state.status != "running" or state.run_id != run_id:
        return state  # closes nothing current: a duplicate, late or foreign event
    if boundary.kind == EventType.RUN_FINISHED.value and isinstance(
        boundary.outcome, RunFinishedInterruptOutcome
    ):
        return state.model_copy(
            update={
                "status": "interrupted",
                "interrupted_run_id": run_id,
                "open_interrupts": _open(run_id, boundary.outcome, at),
            }
        )
    # RUN_ERROR, or RUN_FINISHED with a success, cancelled or absent outcome.
    return state.model_copy(update={"status": "idle", "open_interrupts": []})


def _started(state: ThreadState, run_id: str, agent: str) -> ThreadState:
    if state.status != "idle" or knows_run(state, run_id):
        return state
    return state.model_copy(
        update={
            "status": "running",
            "run_id": run_id,
            "parent_run_id": None,  # an adopted run's parent is unknown: a client's
            "agent": agent,
            "recent_run_ids": remember_run(state.recent_run_ids, run_id),
        }
    )


def _open(
    run_id: str, outcome: RunFinishedInterruptOutcome, at: datetime | None
) -> list[OpenInterrupt]:
    """The outcome's interrupts, first occurrence of each id kept (ids must be unique),
    each opened ``at``."""
    seen: set[str] = set()
    out: list[OpenInterrupt] = []
    for interrupt in outcome.interrupts:
        if interrupt.id not in seen:
            seen.add(interrupt.id)
            out.append(OpenInterrupt(run_id=run_id, interrupt=interrupt, opened_at=at))
    return out


def _clipped(text: str) -> str:
    return text if len(text) <= REMEMBERED_TEXT else text[:REMEMBERED_TEXT - 1] + "…"


def remembered(d: Decision) -> RememberedDecision:
    """What the thread keeps of decision ``d``, to answer its request id again."""
    return RememberedDecision(
        request_id=d.request_id,
        run_id=d.run_id,
        verdict=d.verdict,
        code=d.code,
        message=_clipped(d.message),
        interrupt_ids=d.interrupt_ids[:REMEMBERED_IDS] if d.interrupt_ids else d.interrupt_ids,
        warnings=[_clipped(w) for w in d.warnings[:REMEMBERED_WARNINGS]]
        if d.warnings else d.warnings,
        principal=d.principal,
        key_name=d.key_name,
        policy=d.policy,
        decided_at=d.decided_at,
    )


def replayed(past: RememberedDecision, state: ThreadState, request: RunRequest) -> Decision:
    """The decision already made for this requestId, as it was made, marked replayed (its
    run may be over: whoever waits for it reads the run from the log)."""
    return Decision(
        request_id=past.request_id,
        thread_id=state.thread_id,
        run_id=past.run_id,
        agent=request.agent,
        verdict=past.verdict,
        code=past.code,
        message=past.message,
        interrupt_ids=past.interrupt_ids,
        warnings=past.warnings,
        principal=past.principal,
        key_name=past.key_name,
        policy=past.policy,
        decided_at=past.decided_at,
        replayed=True,
    )
