"""Where a run's records can begin on the log (``lookback``), and the cap on full reads."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import ThreadState
from contracts.records import RememberedDecision, Verdict
from services.consumer.lookback import (
    BUSY_RETRY_AFTER_S,
    CLOCK_SKEW_S,
    FullScans,
    admitted_ms,
    since_ms,
)
from services.consumer.problems import RetryLater

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def decision(run_id: str | None, verdict: Verdict, at: datetime) -> RememberedDecision:
    return RememberedDecision(request_id=uuid.uuid4().hex, run_id=run_id, verdict=verdict,
                              message=verdict, decided_at=at)


def thread(*decisions: RememberedDecision, run_id: str | None = None,
           started: datetime | None = None) -> ThreadState:
    return ThreadState(thread_id="t", status="running" if started else "idle", run_id=run_id,
                       recent_decisions=list(decisions), run_started_at=started)


def test_a_run_nothing_remembers_has_no_bound() -> None:
    assert admitted_ms(None, "r", None) is None
    assert admitted_ms(thread(decision("other", "admitted", T0)), "r", None) is None


def test_an_admission_or_a_queueing_the_thread_remembers_bounds_the_run() -> None:
    for verdict in ("admitted", "queued"):
        state = thread(decision("r", verdict, T0))  # type: ignore[arg-type]
        assert admitted_ms(state, "r", None) == ms(T0)


def test_a_rejection_bounds_nothing_for_a_run_of_that_id_may_have_run_before_it() -> None:
    """``duplicate_run_id``: the run the rejection names began before it was decided."""
    assert admitted_ms(thread(decision("r", "rejected", T0)), "r", None) is None


def test_the_current_runs_start_and_the_admission_routed_here_bound_it_too() -> None:
    state = thread(run_id="r", started=T0 + timedelta(seconds=3))
    assert admitted_ms(state, "r", None) == ms(T0) + 3000
    assert admitted_ms(None, "r", ms(T0)) == ms(T0)
    assert admitted_ms(thread(run_id="r"), "r", None) is None  # idle: no start kept


@given(st.lists(st.tuples(st.sampled_from(["r", "x"]),
                          st.sampled_from(["admitted", "queued", "rejected"]),
                          st.integers(0, 10**6)), max_size=8),
       st.none() | st.integers(0, 10**6), st.none() | st.integers(0, 10**6))
def test_the_bound_is_the_earliest_of_what_is_known_of_the_run(
        remembered: list[tuple[str, Verdict, int]], start_s: int | None,
        routed_s: int | None) -> None:
    started = None if start_s is None else T0 + timedelta(seconds=start_s)
    state = thread(*(decision(run, verdict, T0 + timedelta(seconds=s))
                     for run, verdict, s in remembered), run_id="r", started=started)
    routed = None if routed_s is None else ms(T0) + routed_s * 1000
    known = [s for run, verdict, s in remembered if run == "r" and verdict != "rejected"]
    known += [s for s in (start_s, routed_s) if s is not None]
    expected = ms(T0) + min(known) * 1000 if known else None
    assert admitted_ms(state, "r", routed) == expected


def test_a_read_starts_a_clock_skew_before_the_bound() -> None:
    assert since_ms(T0.timestamp()) == ms(T0) - int(CLOCK_SKEW_S * 1000)


def test_full_scans_are_handed_out_up_to_the_limit_then_refused_with_retry_after() -> None:
    scans = FullScans(2)
    scans.take()
    scans.take()
    with pytest.raises(RetryLater) as refused:
        scans.take()
    assert refused.value.code == "replay_busy"
    response = refused.value.response()
    assert (response.status_code, response.headers["retry-after"]) == (
        503, str(BUSY_RETRY_AFTER_S))
    scans.give()
    scans.take()  # a slot given back is taken again
