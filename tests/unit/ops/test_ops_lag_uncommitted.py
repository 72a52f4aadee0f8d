"""``agui-relay lag`` counts records on partitions a group reads but never committed on.

Requests another client wrote onto partitions of ``requests`` past
AGUI_PARTITIONS wait undecided with no committed offset of the gatekeeper's
group there; listing only committed partitions showed a lag of 0.
"""

from __future__ import annotations

import pytest

from services.cli.ops.lag import lag_grid, lag_rows, uncommitted
from services.kafka.clients import TopicPartition

pytestmark = pytest.mark.unit

R0, R9 = TopicPartition("p.requests", 0), TopicPartition("p.requests", 9)
E0 = TopicPartition("p.events", 0)


def test_a_partition_without_a_committed_offset_counts_from_its_start() -> None:
    rows = lag_rows({"gk": {R0: 5}}, {R0: 5, R9: 7}, starts={R9: 2})
    assert [(r.partition, r.committed, r.lag) for r in rows] == [(0, 5, 0), (9, None, 5)]
    assert rows[1].to_json() == {"group": "gk", "topic": "p.requests", "partition": 9,
                                 "committed": None, "end": 7, "lag": 5, "held": 0}


def test_only_groups_that_read_the_topic_and_only_partitions_with_records() -> None:
    rows = lag_rows({"gk": {R0: 5}, "cs": {E0: 1}}, {R0: 5, R9: 3, E0: 1},
                    starts={R9: 3})
    assert [(r.group, r.topic, r.partition) for r in rows] == [
        ("cs", "p.events", 0), ("gk", "p.requests", 0)]


def test_the_transaction_markers_read_past_are_not_lag() -> None:
    rows = lag_rows({"gk": {R0: 5}}, {R0: 5, R9: 4}, unread={(R9, 2): 1}, starts={R9: 2})
    assert [(r.partition, r.lag) for r in rows] == [(0, 0), (9, 1)]


def test_uncommitted_are_the_other_partitions_of_the_topics_read() -> None:
    assert uncommitted({R0: 1}, [R0, R9, E0]) == [R9]


def test_the_grid_shows_no_committed_offset_as_a_dash() -> None:
    grid = lag_grid(lag_rows({"gk": {R0: 5}}, {R0: 5, R9: 7}, starts={R9: 2}))
    cells = [[cell.plain for cell in row] for row in grid.rows]
    assert ["gk", "p.requests", "9", "-", "7", "5", "0"] in cells
