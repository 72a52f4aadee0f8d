"""The thread checkpoint: markers of a run's life, open interrupts, effects."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from ag_ui.core import Interrupt

from contracts import DecodeError
from services.producer import checkpoint as cp

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OLD = Interrupt(id="old", reason="approval")
NEW = Interrupt(id="new", reason="approval")


def started(still_open: list[Interrupt]) -> cp.ThreadCheckpoint:
    return cp.begin_run(cp.fresh("t"), run_id="r1", request_id="q1", agent="a", worker="w",
                        still_open=still_open, now=NOW)


def test_start_marker_then_end_marker() -> None:
    state = started([])
    assert state.active is not None
    assert state.active.run_id == "r1"
    state = cp.end_run(state, run_id="r1", open_after=[NEW], now=NOW)
    assert state.active is None
    assert cp.has_closed(state, "r1")
    assert [(o.run_id, o.interrupt.id) for o in state.open_interrupts] == [("r1", "new")]


def test_end_marker_of_another_run_leaves_the_active_one() -> None:
    state = cp.end_run(started([]), run_id="older", open_after=None, now=NOW)
    assert state.active is not None
    assert state.active.run_id == "r1"


def test_carried_interrupts_keep_the_run_that_raised_them() -> None:
    before = cp.end_run(cp.begin_run(cp.fresh("t"), run_id="r0", request_id="q0", agent="a",
                                     worker="w", still_open=[], now=NOW),
                        run_id="r0", open_after=[OLD], now=NOW)
    after = cp.end_run(cp.begin_run(before, run_id="r1", request_id="q1", agent="a",
                                    worker="w", still_open=[OLD], now=NOW),
                       run_id="r1", open_after=[OLD, NEW], now=NOW)
    assert [(o.run_id, o.interrupt.id) for o in after.open_interrupts] == [("r0", "old"),
                                                                          ("r1", "new")]


def test_a_run_ended_without_what_it_raised_leaves_the_start_markers_open_set() -> None:
    state = cp.end_run(started([OLD]), run_id="r1", open_after=None, now=NOW)
    assert cp.open_interrupts(state) == [OLD]


def test_closed_runs_and_executions_are_bounded() -> None:
    state = cp.fresh("t")
    for i in range(cp.MAX_CLOSED_RUNS + 5):
        state = cp.end_run(state, run_id=f"r{i}", open_after=[], now=NOW)
    assert len(state.closed_runs) == cp.MAX_CLOSED_RUNS
    assert cp.has_closed(state, f"r{cp.MAX_CLOSED_RUNS + 4}")
    assert not cp.has_closed(state, "r0")


def test_effect_started_then_done_round_trips_on_the_wire() -> None:
    state = cp.effect_started(cp.fresh("t"), key="approve:c1", run_id="r2", now=NOW)
    started_item = cp.execution(state, "approve:c1")
    assert started_item is not None
    assert started_item.status == "started"
    state = cp.effect_done(state, key="approve:c1", result={"deleted": ["/x"]}, now=NOW)
    back = cp.from_bytes(cp.to_bytes(state))
    done = cp.execution(back, "approve:c1")
    assert done is not None
    assert (done.status, done.run_id, done.result) == ("done", "r2", {"deleted": ["/x"]})
    assert b"null" not in cp.to_bytes(cp.fresh("t"))
    with pytest.raises(DecodeError):
        cp.from_bytes(b'{"threadId": 3}')
