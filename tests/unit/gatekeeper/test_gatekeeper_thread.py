"""The thread state machine: which run boundaries move a thread, and where."""

from __future__ import annotations

import pytest
from ag_ui.core import (
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageStartEvent,
)
from gatekeeper_builders import (
    AGENT,
    THREAD,
    cancelled_run,
    failed,
    finished,
    idle_after,
    interrupt,
    interrupted,
    interrupted_by,
    running,
    started,
    succeeded,
)

from contracts import EventHeaders, ThreadState
from services.gatekeeper.thread import (
    RECENT_DECISIONS,
    RECENT_RUNS,
    Boundary,
    apply_boundary,
    apply_event,
    fresh,
    remember_decision,
    remember_run,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "closing",
    [finished("r0"), succeeded("r0"), cancelled_run("r0"), failed("r0")],
    ids=["absent-outcome", "success", "cancelled", "run-error"],
)
def test_a_run_closing_without_interrupts_leaves_the_thread_idle(closing: Boundary) -> None:
    after = apply_boundary(running("r0"), closing)
    assert after.status == "idle"
    assert after.open_interrupts == []
    assert after.run_id == "r0"


def test_an_interrupt_outcome_opens_each_interrupt_with_its_run() -> None:
    after = apply_boundary(
        running("r0"), interrupted_by("r0", interrupt("a"), interrupt("b"), interrupt("a"))
    )
    assert after.status == "interrupted"
    assert after.interrupted_run_id == "r0"
    assert [(o.run_id, o.interrupt.id) for o in after.open_interrupts] == [("r0", "a"), ("r0", "b")]


def test_a_late_run_error_after_an_interrupt_leaves_the_interrupts_open() -> None:
    before = interrupted(interrupt("a"), run_id="r0")
    assert apply_boundary(before, failed("r0")) is before


def test_a_late_run_error_after_success_changes_nothing() -> None:
    before = idle_after("r0")
    assert apply_boundary(before, failed("r0")) is before


@pytest.mark.parametrize(
    "stray",
    [failed("other"), succeeded("other"), interrupted_by("other", interrupt("x"))],
    ids=["run-error", "success", "interrupt"],
)
def test_a_boundary_of_another_run_does_not_close_the_current_one(stray: Boundary) -> None:
    before = running("r0")
    assert apply_boundary(before, stray) is before


def test_a_duplicate_run_finished_is_ignored() -> None:
    once = apply_boundary(running("r0"), interrupted_by("r0", interrupt("a")))
    assert apply_boundary(once, interrupted_by("r0", interrupt("b"))) is once


def test_run_started_for_the_admitted_run_changes_nothing() -> None:
    before = running("r0")
    assert apply_boundary(before, started("r0")) is before


def test_run_started_of_an_unknown_run_on_an_idle_thread_marks_it_running() -> None:
    after = apply_boundary(idle_after("r0"), started("foreign"))
    assert (after.status, after.run_id, after.agent) == ("running", "foreign", AGENT)
    assert after.recent_run_ids[-1] == "foreign"


@pytest.mark.parametrize(
    "before",
    [idle_after("r0"), running("r1"), interrupted(interrupt("a"), run_id="r1")],
    ids=["idle-known-run", "running", "interrupted"],
)
def test_run_started_never_reopens_an_old_run_nor_displaces_another(before: ThreadState) -> None:
    assert apply_boundary(before, started("r0")) is before


def test_apply_event_reads_the_event_type_and_correlates_by_the_run_header() -> None:
    state = running("r0")
    headers = EventHeaders("r0", "RUN_ERROR", AGENT, 7)
    assert apply_event(state, headers, RunErrorEvent(message="boom")).status == "idle"
    other = EventHeaders("r9", "RUN_ERROR", AGENT, 7)
    assert apply_event(state, other, RunErrorEvent(message="boom")) is state
    assert apply_event(state, headers, TextMessageStartEvent(message_id="m")) is state


def test_apply_event_takes_the_interrupts_from_run_finished() -> None:
    event = RunFinishedEvent(
        thread_id=THREAD,
        run_id="r0",
        outcome=RunFinishedInterruptOutcome(interrupts=[interrupt("a", expires_at="soon")]),
    )
    after = apply_event(running("r0"), EventHeaders("r0", "RUN_FINISHED", AGENT, 9), event)
    assert after.status == "interrupted"
    assert after.open_interrupts[0].interrupt.expires_at == "soon"


def test_apply_event_adopts_a_foreign_run_started() -> None:
    event = RunStartedEvent(thread_id=THREAD, run_id="x")
    after = apply_event(fresh(THREAD), EventHeaders("x", "RUN_STARTED", AGENT, 0), event)
    assert (after.status, after.run_id) == ("running", "x")


def test_remembered_runs_and_decisions_are_bounded_and_most_recent_last() -> None:
    runs: list[str] = []
    for n in range(3 * RECENT_RUNS):
        runs = remember_run(runs, f"r{n}")
    assert runs == [f"r{n}" for n in range(2 * RECENT_RUNS, 3 * RECENT_RUNS)]
    assert remember_run(["a", "b"], "a") == ["b", "a"]

    state = running("r0")
    decisions = list(state.recent_decisions)
    first = decisions[0]
    for n in range(2 * RECENT_DECISIONS):
        decisions = remember_decision(decisions, first.model_copy(update={"request_id": f"q{n}"}))
    assert len(decisions) == RECENT_DECISIONS
    assert decisions[-1].request_id == f"q{2 * RECENT_DECISIONS - 1}"
    replaced = remember_decision(decisions, decisions[0].model_copy(update={"message": "new"}))
    assert len(replaced) == RECENT_DECISIONS
    assert replaced[-1].message == "new"


def test_a_failed_boundary_closes_its_run_as_run_error_would() -> None:
    closing = interrupted_by("r0", interrupt("a"))
    failure = closing.failed()
    assert (failure.kind, failure.run_id, failure.agent, failure.outcome) == (
        "RUN_ERROR", "r0", closing.agent, None)
    after = apply_boundary(running("r0"), failure)
    assert (after.status, after.open_interrupts) == ("idle", [])
    idle = idle_after("r0")
    assert apply_boundary(idle, finished("r0").failed()) is idle, "it closes nothing else"
