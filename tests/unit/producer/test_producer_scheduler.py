"""Scheduler: bounded concurrency, per-thread order, commit positions, backpressure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.producer.scheduler import Job, Scheduler

pytestmark = pytest.mark.unit


def test_one_run_per_thread_and_at_most_max_running() -> None:
    s: Scheduler[str] = Scheduler(max_running=2, max_buffered=100)
    a1 = s.offer(0, 10, "a", "a1")
    s.offer(0, 11, "a", "a2")
    b1 = s.offer(0, 12, "b", "b1")
    s.offer(0, 13, "c", "c1")
    assert [j.payload for j in s.ready()] == ["a1", "b1"]
    assert s.ready() == []
    s.finish(a1)
    assert [j.payload for j in s.ready()] == ["c1"]
    s.finish(b1)
    assert [j.payload for j in s.ready()] == ["a2"]


def test_commit_position_waits_for_the_lowest_unfinished_offset() -> None:
    s: Scheduler[str] = Scheduler(max_running=10, max_buffered=100)
    jobs = [s.offer(3, offset, f"t{offset}", "x") for offset in (5, 7, 8)]  # gaps: tx markers
    s.ready()
    s.finish(jobs[2])
    s.finish(jobs[1])
    assert s.positions() == {}
    s.finish(jobs[0])
    assert s.positions() == {3: 9}


def test_backpressure_pauses_full_partitions_and_resumes_at_half() -> None:
    s: Scheduler[str] = Scheduler(max_running=1, max_buffered=4)
    jobs = [s.offer(0, i, "same-thread", "x") for i in range(4)]
    assert s.backpressure() == ({0}, set())
    assert s.backpressure() == (set(), set())
    for job in jobs[:2]:
        s.ready()
        s.finish(job)
    assert s.backpressure() == (set(), {0})


def test_revoke_drops_queued_jobs_drains_running_ones_and_stops_before_dropped() -> None:
    s: Scheduler[str] = Scheduler(max_running=1, max_buffered=10)
    first = s.offer(1, 0, "t", "x")
    second = s.offer(1, 1, "t", "y")
    other = s.offer(2, 0, "u", "z")
    s.ready()
    assert s.revoke({1}) == [first]
    assert second.state == "dropped"
    s.finish(first)  # still accepted after the revoke
    assert s.positions() == {1: 1}  # the dropped offset 1 is left for the next owner
    s.forget({1})
    assert [j.payload for j in s.ready()] == ["z"]
    s.finish(other)
    assert s.positions() == {2: 1}
    assert s.idle


def test_a_running_job_revoked_before_its_run_began_is_left_for_the_next_owner() -> None:
    s: Scheduler[str] = Scheduler(max_running=2, max_buffered=10)
    waited = s.offer(1, 0, "t", "x")  # waiting for a handover when the partition goes
    later = s.offer(1, 1, "t", "y")
    other = s.offer(1, 2, "u", "z")
    assert s.ready() == [waited, other]
    assert s.revoke({1}) == [waited, other]
    s.finish(other)
    s.finish(waited, ran=False)
    assert (waited.state, later.state) == ("dropped", "dropped")
    assert s.positions() == {}  # nothing committed: offset 0 is read again by the next owner
    assert s.running == 0
    assert s.idle


def test_a_partition_back_again_never_commits_past_a_run_that_outlived_its_drain() -> None:
    s: Scheduler[str] = Scheduler(max_running=3, max_buffered=10)
    first, second, third = (s.offer(0, n, f"t{n}", "x") for n in (1, 2, 3))
    assert s.ready() == [first, second, third]
    s.finish(first)
    s.finish(second)
    assert s.revoke({0}) == [third]  # the drain gave up on it; the partition is forgotten
    s.forget({0})
    again = s.offer(0, 4, "t4", "y")  # the partition is assigned back
    assert s.ready() == [again]
    s.finish(again)
    assert s.positions() == {0: 3}  # not 5: the run of offset 3 is still going
    s.finish(third)
    assert s.positions() == {0: 5}


def test_skipped_records_advance_the_position_in_order() -> None:
    s: Scheduler[str] = Scheduler(max_running=1, max_buffered=10)
    job = s.offer(0, 4, "t", "x")
    s.skip(0, 5)
    assert s.positions() == {}
    s.ready()
    s.finish(job)
    assert s.positions() == {0: 6}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["offer", "ready", "finish", "revoke"]),
                          st.integers(0, 2), st.integers(0, 4), st.integers(0, 50)),
                max_size=80),
       st.integers(1, 4))
def test_order_bounds_and_commit_safety_hold_under_any_interleaving(
        steps: list[tuple[str, int, int, int]], max_running: int) -> None:
    s: Scheduler[int] = Scheduler(max_running=max_running, max_buffered=5)
    next_offset = {0: 0, 1: 0, 2: 0}
    offered: dict[str, list[Job[int]]] = {}
    started: dict[str, list[Job[int]]] = {}
    running: list[Job[int]] = []
    live: list[Job[int]] = []
    last_position: dict[int, int] = {}
    for action, partition, thread, pick in steps:
        thread_id = f"p{partition}-t{thread}"  # a thread lives in one partition
        if action == "offer":
            next_offset[partition] += 1 + pick % 3  # offsets with gaps
            job = s.offer(partition, next_offset[partition], thread_id, pick)
            offered.setdefault(thread_id, []).append(job)
            live.append(job)
        elif action == "ready":
            for job in s.ready():
                started.setdefault(job.thread_id, []).append(job)
                running.append(job)
        elif action == "finish" and running:
            job = running.pop(pick % len(running))
            s.finish(job)
        elif action == "revoke" and pick % 7 == 0:
            still = s.revoke({partition})
            assert all(j in running for j in still)
            if pick % 2:
                s.forget({partition})
                last_position.pop(partition, None)
                live = [j for j in live if j.partition != partition or j.state == "running"]
        assert s.running == len(running) <= max_running
        assert len({j.thread_id for j in running}) == len(running)
        for p, position in s.positions().items():
            unfinished = [j.offset for j in live if j.partition == p and j.state != "done"]
            assert all(position <= off for off in unfinished)
            assert position >= last_position.get(p, 0)
            last_position[p] = position
    for thread_id, jobs in started.items():
        expected = [j for j in offered[thread_id] if j.state != "dropped"]
        assert jobs == expected[:len(jobs)]
