"""The topic catalog: names under the prefix, co-partitioning, and each topic's configs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import TopicCatalog
from contracts.topics import DAY_MS

pytestmark = pytest.mark.unit

prefixes = st.from_regex(r"[a-z][a-z0-9_-]{0,20}", fullmatch=True)
agents = st.lists(st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True), max_size=4,
                  unique=True).map(tuple)


@given(prefixes, st.integers(1, 64), st.integers(1, 64), agents)
def test_every_name_is_under_the_prefix_and_unique(
    prefix: str, partitions: int, dispatch_partitions: int, names: tuple[str, ...]
) -> None:
    catalog = TopicCatalog(prefix, partitions, dispatch_partitions)
    specs = catalog.specs(names)
    assert all(s.name.startswith(f"{prefix}.") for s in specs)
    assert len({s.name for s in specs}) == len(specs)
    assert {catalog.dispatch(a) for a in names} <= {s.name for s in specs}


@given(prefixes, st.integers(1, 64), st.integers(1, 64), agents)
def test_co_partitioned_topics_share_one_partition_count(
    prefix: str, partitions: int, dispatch_partitions: int, names: tuple[str, ...]
) -> None:
    specs = TopicCatalog(prefix, partitions, dispatch_partitions).specs(names)
    co = {s.role: s.partitions for s in specs if s.copartitioned}
    assert {"requests", "events", "threads", "control"} <= set(co)
    assert set(co.values()) == {partitions}
    dispatch = [s for s in specs if s.role == "dispatch"]
    assert all(s.partitions == dispatch_partitions for s in dispatch)


def test_the_thread_state_topic_is_compacted_and_the_others_expire() -> None:
    specs = {s.role: s for s in TopicCatalog("x").specs(("approval",))}
    assert specs["threads"].configs["cleanup.policy"] == "compact"
    assert "retention.ms" not in specs["threads"].configs
    retention_days = {"requests": 7, "decisions": 7, "events": 7, "control": 1,
                      "deadletter": 30, "dispatch": 7}
    for role, days in retention_days.items():
        assert specs[role].configs["cleanup.policy"] == "delete", role
        assert specs[role].configs["retention.ms"] == str(days * DAY_MS), role


def test_names_follow_the_architecture() -> None:
    catalog = TopicCatalog("acme")
    assert (catalog.requests, catalog.decisions, catalog.events, catalog.threads,
            catalog.control, catalog.deadletter, catalog.dispatch("approval")) == (
        "acme.requests", "acme.decisions", "acme.events", "acme.threads", "acme.control",
        "acme.deadletter", "acme.dispatch.approval")
    assert TopicCatalog().requests == "agui.requests"
