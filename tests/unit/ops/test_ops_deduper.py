"""The operator tools' ``Deduper``: copies and stale events dropped, memory bounded by runs.

A ``tail`` left following a busy deployment remembered every ``(run, seq)`` it
had read: 400,000 events took it from 78 to 167 MB (found by probing). It now
keeps one number per run, for a bounded number of runs.
"""

from __future__ import annotations

import tracemalloc

from services.kafka.records import Deduper, OpsRecord


def ev(run: str, seq: str | int, offset: int = 0, role: str = "events", thread: str = "t"
       ) -> OpsRecord:
    return OpsRecord("p.events", role, 0, offset, offset, thread,
                     {"agui-run-id": run, "agui-seq": str(seq)}, {"type": "X"})


def test_a_resent_event_is_dropped_and_one_not_seen_yet_kept_in_any_order() -> None:
    d = Deduper()
    kept = [d.fresh(ev("r1", s)) for s in (0, 1, 1, 2, 0, 5, 3, 6, 5, 4, 3, 7)]
    assert kept == [True, True, False, True, False, True, True, True, False, True, False, True]


def test_a_stray_high_number_hides_nothing_else_of_its_run() -> None:
    """One record with a run's headers and a high number (not an event of it, or a
    writer's mistake) had hidden the rest of the run when only the highest was kept."""
    d = Deduper()
    assert d.fresh(ev("r1", 0))
    assert d.fresh(ev("r1", 1000))
    assert all(d.fresh(ev("r1", s)) for s in range(1, 500))
    assert not d.fresh(ev("r1", 1000))


def test_a_gap_that_never_fills_is_given_up_and_memory_stays_bounded() -> None:
    d = Deduper()
    assert d.fresh(ev("r1", 0))
    assert all(d.fresh(ev("r1", s)) for s in range(2, 2 + 10 * Deduper.AHEAD))  # 1 lost
    assert not d.fresh(ev("r1", 5))


def test_runs_are_told_apart_and_non_events_or_odd_numbers_pass() -> None:
    d = Deduper()
    assert d.fresh(ev("r1", 3))
    assert d.fresh(ev("r2", 3))
    assert not d.fresh(ev("r2", 3))
    assert d.fresh(ev("r1", 3, role="decisions"))
    assert d.fresh(ev("r1", 3, role="decisions"))
    assert d.fresh(ev("r1", "²"))
    assert d.fresh(ev("r1", "x"))


def test_the_least_recently_seen_run_is_forgotten_first() -> None:
    d = Deduper(runs=2)
    assert d.fresh(ev("a", 1))
    assert d.fresh(ev("b", 1))
    assert not d.fresh(ev("a", 1))  # a is now the most recent
    assert d.fresh(ev("c", 1))  # b forgotten
    assert not d.fresh(ev("a", 1))
    assert d.fresh(ev("b", 1))


def test_memory_is_bounded_by_runs_not_by_the_events_read() -> None:
    d = Deduper()
    in_order = [ev(f"run-{i % 100}", i // 100) for i in range(200_000)]
    gappy = [ev(f"gap-{i % 100}", i) for i in range(200_000)]  # every run skips 99 of 100
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert all(d.fresh(r) for r in in_order)
        grown_in_order = tracemalloc.get_traced_memory()[0] - before
        assert all(d.fresh(r) for r in gappy)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown_in_order < 200_000, f"{grown_in_order:,} bytes kept for 100 runs in order"
    assert grown < 3_000_000, f"{grown:,} bytes kept for 200 runs"


def test_runs_of_the_same_id_on_other_threads_are_other_runs() -> None:
    """Run ids are unique per thread only: keyed by the run id alone, a second thread's
    ``run-1`` read as copies of the first's and vanished from ``tail``."""
    d = Deduper()
    assert all(d.fresh(ev("run-1", s)) for s in range(3))
    assert all(d.fresh(ev("run-1", s, thread="other")) for s in range(3))
    assert not d.fresh(ev("run-1", 1, thread="other"))
    assert d.fresh_ids("third", "run-1", "0")
    assert not d.fresh_ids("third", "run-1", "0")
