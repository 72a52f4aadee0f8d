"""Stuck threads are counted alike by the gauges and the report, at any ``now``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from gatekeeper_builders import NOW, expiring, interrupt
from hypothesis import given
from hypothesis import strategies as st

from contracts import OpenInterrupt, ThreadState
from services.gatekeeper.census import Census, Counts, examine, expired_ids, running_for
from services.gatekeeper.telemetry import Telemetry
from services.runtime.metrics import sample_value

pytestmark = pytest.mark.unit

LIMIT = timedelta(minutes=5)


def running(thread_id: str, started_ago: timedelta | None) -> ThreadState:
    started = NOW - started_ago if started_ago is not None else None
    return ThreadState(thread_id=thread_id, status="running", run_id="r1",
                       run_started_at=started)


def waiting(thread_id: str, *interrupts: object, status: str = "interrupted") -> ThreadState:
    opened = [OpenInterrupt(run_id="r0", interrupt=i) for i in interrupts]
    return ThreadState(thread_id=thread_id, status=status,  # type: ignore[arg-type]
                       run_id="r0", interrupted_run_id="r0", open_interrupts=opened)


def test_expiry_reads_as_the_reference_client_and_never_for_bad_dates() -> None:
    state = waiting("t", expiring("past", -timedelta(seconds=1)), expiring("now", timedelta()),
                    expiring("later", timedelta(milliseconds=1)), interrupt("never"),
                    interrupt("bad", expires_at="not a date"),
                    interrupt("legacy", expires_at="Mar 1, 2026 11:59"))
    assert expired_ids(state, NOW) == ["past", "now", "legacy"]


def test_only_a_running_thread_has_a_running_time() -> None:
    assert running_for(running("t", timedelta(minutes=6)), NOW) == timedelta(minutes=6)
    assert running_for(running("t", None), NOW) is None
    assert running_for(waiting("t"), NOW) is None


def test_the_report_lists_long_runs_first_then_expired_interrupts() -> None:
    states = [
        running("short", timedelta(minutes=4)),
        running("long", timedelta(minutes=9)),
        running("longer", timedelta(hours=2)),
        running("exactly", LIMIT),  # not *longer* than the limit
        waiting("expired", expiring("i1", -timedelta(minutes=1)),
                expiring("i2", -timedelta(hours=1)), expiring("i3", timedelta(hours=1))),
        waiting("fresh", expiring("i4", timedelta(minutes=1))),
        ThreadState(thread_id="idle"),
    ]
    counts, stuck = examine(states, NOW, LIMIT)
    assert counts == Counts(running=4, interrupted=2, open_interrupts=4, expired_interrupts=2,
                            running_too_long=2)
    assert [s.state.thread_id for s in stuck] == ["longer", "long", "expired"]
    assert stuck[0].running == timedelta(hours=2)
    assert stuck[2].expired == ("i1", "i2")
    assert stuck[2].running is None


def test_a_child_threads_interrupts_are_counted_apart_once_offered_at_its_parent() -> None:
    """A pipeline's question is open on the child and, carried up, on its parent: it is
    one question, counted (open, expired) where it is offered and answered."""
    late = -timedelta(minutes=1)
    child = waiting("t/review-1", expiring("sign-off", late)).model_copy(
        update={"parent_run_id": "r0"})
    states = [waiting("t", expiring("review/sign-off", late)), child,
              running("t/slow-2", timedelta(hours=1)).model_copy(update={"parent_run_id": "r0"})]
    counts, stuck = examine(states, NOW, LIMIT)
    assert counts == Counts(running=1, interrupted=2, open_interrupts=1, expired_interrupts=1,
                            running_too_long=1, child_interrupts=1)
    assert [s.state.thread_id for s in stuck] == ["t/slow-2", "t"]  # a child run can be slow
    census = Census()
    census.restore(0, {s.thread_id: s for s in states})
    assert census.count(NOW, LIMIT) == counts


def test_the_census_follows_restores_commits_and_releases() -> None:
    census = Census()
    census.restore(0, {"a": running("a", timedelta(minutes=10)), "b": ThreadState(thread_id="b")})
    census.restore(1, {"c": waiting("c", expiring("i1", -timedelta(seconds=5)))})
    assert census.count(NOW, LIMIT) == Counts(running=1, interrupted=1, open_interrupts=1,
                                              expired_interrupts=1, running_too_long=1)
    census.update(0, {"a": ThreadState(thread_id="a"), "d": running("d", timedelta(seconds=1))})
    census.update(1, {"c": running("c", timedelta(seconds=1))})
    assert census.count(NOW, LIMIT) == Counts(running=2)
    census.release([0])
    assert [s.thread_id for s in census.states()] == ["c"]


def test_an_idle_thread_still_holding_an_interrupt_is_watched() -> None:
    # e.g. a run that ended in error after an interrupt: the interrupt stays open
    census = Census()
    census.update(0, {"t": waiting("t", expiring("i", -timedelta(days=1)), status="idle")})
    assert census.count(NOW, LIMIT).expired_interrupts == 1


def test_telemetry_publishes_the_census_as_gauges() -> None:
    telemetry = Telemetry("g-census", interval_s=1, running_limit_s=LIMIT.total_seconds())
    telemetry.restored(3, {"a": running("a", timedelta(hours=1)),
                           "b": waiting("b", expiring("i", -timedelta(seconds=1)),
                                        interrupt("j"))})
    telemetry.publish(NOW)
    assert sample_value("agui_open_interrupts") == 2
    assert sample_value("agui_expired_interrupts") == 1
    assert sample_value("agui_threads_running_too_long") == 1
    assert sample_value("agui_threads", {"status": "interrupted"}) == 1
    telemetry.released([3])
    telemetry.publish(NOW)
    assert sample_value("agui_open_interrupts") == 0
    assert sample_value("agui_threads_running_too_long") == 0


ages = st.one_of(st.none(), st.integers(0, 3600).map(lambda s: timedelta(seconds=s)))
offsets = st.integers(-7200, 7200).map(lambda s: timedelta(seconds=s))
thread_states = st.one_of(
    st.builds(lambda i, age: running(f"r{i}", age), st.integers(0, 30), ages),
    st.builds(lambda i, deltas: waiting(f"w{i}", *[expiring(f"i{n}", d)
                                                  for n, d in enumerate(deltas)]),
              st.integers(0, 30), st.lists(offsets, max_size=3)),
    st.builds(lambda i: ThreadState(thread_id=f"z{i}"), st.integers(0, 30)),
)


@given(st.lists(st.tuples(st.integers(0, 3), thread_states), max_size=40), offsets)
def test_incremental_counts_equal_counting_every_latest_state(
    changes: list[tuple[int, ThreadState]], shift: timedelta
) -> None:
    census = Census()
    latest: dict[str, ThreadState] = {}
    for partition, state in changes:
        owner = next((p for p, s in latest.items() if s.thread_id == state.thread_id), None)
        key = owner or f"{partition}/{state.thread_id}"
        census.update(int(key.split("/")[0]), {state.thread_id: state})
        latest[key] = state
    now = NOW + shift
    assert census.count(now, LIMIT) == examine(latest.values(), now, LIMIT)[0]
