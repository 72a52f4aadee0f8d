"""``reconcile``: what closing a lost run writes, for every state a dead worker can leave.

A run's end must be on ``runs`` if and only if it is on ``events``. The
states below are every one a worker can leave by dying between two writes
(and one a worker of an earlier version leaves); after the plan is written,
both topics hold the same end, and ``events`` a gapless sequence.
"""

from __future__ import annotations

import pytest

from services.producer.reconcile import Found, Plan, Trace, reconcile

pytestmark = pytest.mark.unit


def rec(seq: int, kind: str) -> Found:
    return Found(seq, kind, f"{kind}-{seq}".encode(), (("agui-seq", str(seq).encode()),))


def events(*records: Found) -> Trace:
    trace = Trace()
    for r in records:
        trace.add(r, keep=False)
    return trace


def runs(*records: Found) -> Trace:
    trace = Trace()
    for r in records:
        trace.add(r, keep=True)
    return trace


def written(before_events: list[Found], before_runs: list[Found],
            plan: Plan) -> tuple[list[Found], list[Found]]:
    """Both topics' records of the run once ``plan`` is written (new records by seq)."""
    lost = ([rec(plan.lost_from, "RUN_STARTED"), rec(plan.lost_from + 1, "RUN_ERROR")]
            if plan.with_start and plan.lost_from is not None
            else [rec(plan.lost_from, "RUN_ERROR")] if plan.lost_from is not None else [])
    return ([*before_events, *plan.to_events, *lost], [*before_runs, *plan.to_runs, *lost])


def ends(records: list[Found]) -> list[bytes]:
    return [r.value for r in records if r.terminal]


CASES = {
    "nothing written": ([], []),
    "started on events only": ([rec(0, "RUN_STARTED")], []),
    "started on runs only": ([], [rec(0, "RUN_STARTED")]),
    "started on both": ([rec(0, "RUN_STARTED")], [rec(0, "RUN_STARTED")]),
    "mid-run": ([rec(0, "RUN_STARTED"), rec(1, "TEXT_MESSAGE_START"),
                 rec(2, "TEXT_MESSAGE_CONTENT")], [rec(0, "RUN_STARTED")]),
    "end on runs only": ([rec(0, "RUN_STARTED"), rec(1, "TEXT_MESSAGE_CONTENT")],
                         [rec(0, "RUN_STARTED"), rec(2, "RUN_FINISHED")]),
    "end on runs, start never on events": ([], [rec(0, "RUN_STARTED"), rec(1, "RUN_ERROR")]),
    "end on both": ([rec(0, "RUN_STARTED"), rec(1, "RUN_FINISHED")],
                    [rec(0, "RUN_STARTED"), rec(1, "RUN_FINISHED")]),
    "end on events only (an earlier version)": ([rec(0, "RUN_STARTED"), rec(1, "RUN_ERROR")],
                                                []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_after_the_plan_both_topics_hold_one_and_the_same_end(name: str) -> None:
    on_events, on_runs = CASES[name]
    plan = reconcile(events(*on_events), runs(*on_runs))
    after_events, after_runs = written(on_events, on_runs, plan)
    assert len(ends(after_events)) == 1
    assert ends(after_events) == ends(after_runs)
    seqs = sorted({r.seq for r in after_events})
    assert seqs == list(range(len(seqs))), "events numbered without a gap"
    assert min(after_events, key=lambda r: r.seq).event_type == "RUN_STARTED", "opens the run"


def test_the_end_found_on_runs_is_copied_as_found() -> None:
    end = rec(2, "RUN_FINISHED")
    plan = reconcile(events(rec(0, "RUN_STARTED"), rec(1, "TEXT_MESSAGE_CONTENT")),
                     runs(rec(0, "RUN_STARTED"), end))
    assert plan == Plan("completed", to_events=(end,), end=end)


def test_a_start_events_lacks_is_copied_before_the_end() -> None:
    start, end = rec(0, "RUN_STARTED"), rec(1, "RUN_ERROR")
    plan = reconcile(events(), runs(start, end))
    assert plan.to_events == (start, end)


def test_an_end_on_both_needs_nothing() -> None:
    end = rec(1, "RUN_FINISHED")
    plan = reconcile(events(rec(0, "RUN_STARTED"), end), runs(rec(0, "RUN_STARTED"), end))
    assert plan == Plan("found_closed", end=end)


def test_an_end_on_events_only_is_copied_to_runs() -> None:
    end = rec(3, "RUN_FINISHED")
    plan = reconcile(events(rec(0, "RUN_STARTED"), rec(2, "TEXT_MESSAGE_END"), end), runs())
    assert plan == Plan("found_closed", to_runs=(end,), end=end)


def test_no_end_anywhere_is_a_worker_lost_numbered_after_both_topics() -> None:
    plan = reconcile(events(rec(0, "RUN_STARTED"), rec(1, "TEXT_MESSAGE_START")),
                     runs(rec(0, "RUN_STARTED")))
    assert plan == Plan("worker_lost", lost_from=2)
    nothing = reconcile(events(), runs())
    assert nothing == Plan("worker_lost", lost_from=0, with_start=True)
    started_on_runs = reconcile(events(), runs(rec(0, "RUN_STARTED")))
    assert started_on_runs == Plan("worker_lost", to_events=(rec(0, "RUN_STARTED"),),
                                   lost_from=1)


def test_duplicates_are_read_once_and_events_keep_only_their_end() -> None:
    trace = events(rec(0, "RUN_STARTED"), rec(0, "RUN_STARTED"), rec(1, "TEXT_MESSAGE_START"))
    assert (trace.last_seq, trace.kept, trace.terminal) == (1, {}, None)
    first, again = rec(1, "RUN_ERROR"), Found(1, "RUN_ERROR", b"again")
    kept = runs(rec(0, "RUN_STARTED"), first, again)
    assert kept.terminal == first
