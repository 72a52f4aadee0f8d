"""Where a thread stands after a run's end, as the gatekeeper will record it. Pure.

A client that has read a run's ``RUN_FINISHED`` or ``RUN_ERROR`` may ask for
its thread before the gatekeeper has written the state that event produces
(it commits the new ``ThreadState`` after reading the event, tens of
milliseconds later) or before this instance's thread view has read it.
``freshness`` waits for that state; these are the decisions it needs:
``passed`` tells whether a state is at or past a run's end, and ``closed``
computes the state the end produces with the gatekeeper's own pure rules
(``rules.on_boundary``, the boundary read as ``gatekeeper.batch`` reads it:
an invalid ``RUN_FINISHED`` changes nothing, one breaking an input limit
closes the run as failed), for when the gatekeeper has not written it within
the bound. The one thing not derived is the gatekeeper's next decision: a
request queued behind the run (busy policy ``enqueue``) stays queued in the
answer, since deciding it takes the gatekeeper's policy and record checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ag_ui.core import EventType, RunFinishedEvent

from contracts import DecodeError, ThreadState, decode
from contracts.limits import InputLimits, outcome_limits
from services.gatekeeper.rules import Policy, on_boundary
from services.gatekeeper.thread import Boundary, knows_run

KEPT_BYTES = 16_384
"""A terminal event's value is kept for ``closed`` up to this size (most are far smaller:
an interrupt outcome's interrupts); a larger one is only waited for."""


@dataclass(frozen=True, slots=True)
class Ending:
    """A run's terminal event as the fan-out read it."""

    run_id: str
    event_type: str
    agent: str
    offset: int
    value: bytes | None
    """The record's value, or None past ``KEPT_BYTES``."""


def passed(state: ThreadState | None, run_id: str) -> bool:
    """Whether ``state`` is at or past the end of ``run_id``: it knows the run, not running it."""
    if state is None or not knows_run(state, run_id):
        return False
    return not (state.status == "running" and state.run_id == run_id)


def boundary(ending: Ending, limits: InputLimits) -> Boundary | None:
    """The boundary the gatekeeper reads from ``ending``; None when it reads none (or
    the value was not kept)."""
    if ending.event_type != EventType.RUN_FINISHED.value:
        return Boundary(ending.event_type, ending.run_id, ending.agent)
    if ending.value is None:
        return None
    try:
        event = decode(RunFinishedEvent, ending.value)
    except DecodeError:
        return None
    base = Boundary(ending.event_type, ending.run_id, ending.agent)
    if outcome_limits(ending.value, limits) is not None:
        return base.failed()
    return Boundary(base.kind, base.run_id, base.agent, event.outcome)


def closed(state: ThreadState, ending: Ending, now: datetime,
           limits: InputLimits) -> ThreadState | None:
    """The state ``ending`` produces from ``state`` (queued requests left undecided);
    None when that cannot be told."""
    found = boundary(ending, limits)
    if found is None:
        return None
    held = state.queued
    after, _ = on_boundary(state.model_copy(update={"queued": []}), found, now, Policy())
    return after.model_copy(update={"queued": held}) if held else after
