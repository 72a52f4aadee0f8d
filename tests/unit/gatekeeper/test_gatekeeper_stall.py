"""The stall rule behind ``/readyz``: input waiting, committed offsets standing still."""

from __future__ import annotations

import pytest

from services.gatekeeper.stall import Seen, StallWatch

pytestmark = pytest.mark.unit


def watch(*rounds: tuple[float, dict[int, Seen]]) -> StallWatch:
    w = StallWatch(stall_s=30)
    for now, seen in rounds:
        w.observe(seen, now)
    return w


def test_input_waiting_with_offsets_unchanged_past_the_limit_is_a_stall() -> None:
    stuck = Seen((5, 9), waiting=True)
    w = watch((0, {0: stuck}), (10, {0: stuck}), (29, {0: stuck}))
    assert w.stalled(29.9) == {}
    assert w.stalled(30) == {0: 30}


def test_offsets_that_move_are_progress() -> None:
    w = watch((0, {0: Seen((5, 9), True)}), (20, {0: Seen((6, 9), True)}),
              (40, {0: Seen((6, 9), True)}))
    assert w.stalled(45) == {}
    assert w.stalled(50) == {0: 30}


def test_an_idle_partition_is_never_stalled_however_old_its_last_commit() -> None:
    idle = Seen((5, 9), waiting=False)
    w = watch((0, {0: idle}), (1000, {0: idle}))
    assert w.stalled(5000) == {}


def test_the_clock_starts_when_input_arrives_not_at_the_last_commit() -> None:
    w = watch((0, {0: Seen((5, 9), False)}), (1000, {0: Seen((5, 9), True)}))
    assert w.stalled(1010) == {}
    assert w.stalled(1030) == {0: 30}


def test_only_the_stuck_partition_is_named() -> None:
    rounds = [(t, {0: Seen((t, 0), True), 1: Seen((1, 1), True)}) for t in range(0, 40, 5)]
    assert watch(*rounds).stalled(40) == {1: 40}


def test_a_released_partition_is_forgotten() -> None:
    w = watch((0, {0: Seen((1, 1), True)}), (40, {}))
    assert w.stalled(100) == {}
    w.observe({0: Seen((1, 1), True)}, 100)
    assert w.stalled(129) == {}, "taken over again: its clock starts again"


def test_a_partition_becoming_stalled_is_reported_once() -> None:
    w = StallWatch(stall_s=30)
    stuck = {0: Seen((1, 1), True)}
    assert [w.observe(stuck, t) for t in (0, 20, 30, 40)] == [[], [], [0], []]


def test_observations_are_due_every_half_second() -> None:
    w = StallWatch(stall_s=30)
    assert w.due(0)
    w.observe({}, 0)
    assert not w.due(0.4)
    assert w.due(0.5)
