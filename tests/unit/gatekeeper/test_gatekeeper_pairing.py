"""``paired``: a gatekeeper decides only partitions it holds of both ``requests`` and ``runs``."""

from __future__ import annotations

import pytest

from services.gatekeeper.partition import paired
from services.kafka.clients import TopicPartition

pytestmark = pytest.mark.unit


def tps(topic: str, *numbers: int) -> set[TopicPartition]:
    return {TopicPartition(topic, n) for n in numbers}


def test_a_co_partitioned_assignment_is_kept_whole() -> None:
    assigned = tps("p.requests", 0, 1, 2) | tps("p.runs", 0, 1, 2)
    assert paired(assigned, "p.requests", "p.runs") == (assigned, set())


def test_halves_are_set_aside() -> None:
    # a member of an earlier version reads events: the range assignor splits runs among
    # the new members only, requests among all
    assigned = tps("p.requests", 0, 1) | tps("p.runs", 0, 1, 2, 3)
    kept, unpaired = paired(assigned, "p.requests", "p.runs")
    assert kept == tps("p.requests", 0, 1) | tps("p.runs", 0, 1)
    assert unpaired == tps("p.runs", 2, 3)


def test_without_runs_nothing_is_kept() -> None:
    assigned = tps("p.requests", 0, 1)
    assert paired(assigned, "p.requests", "p.runs") == (set(), assigned)
    assert paired(set(), "p.requests", "p.runs") == (set(), set())


def test_other_topics_are_never_kept() -> None:
    assigned = tps("p.requests", 0) | tps("p.runs", 0) | tps("p.events", 0)
    kept, unpaired = paired(assigned, "p.requests", "p.runs")
    assert kept == tps("p.requests", 0) | tps("p.runs", 0)
    assert unpaired == tps("p.events", 0)
