"""The pure parts of ``agui-relay topics``: retention wording and catalog mismatches."""

from __future__ import annotations

import pytest

from contracts import TopicCatalog
from services.cli.topics import problems, retention
from services.kafka.admin import TopicState

pytestmark = pytest.mark.unit


def broker_view(catalog: TopicCatalog, **partitions: int | None) -> list[TopicState]:
    """The catalog as a broker would report it, with some roles' partition counts changed."""
    out = []
    for spec in catalog.specs(("approval",)):
        count = partitions.get(spec.role, spec.partitions)
        out.append(TopicState(spec, count, dict(spec.configs) if count is not None else {}))
    return out


@pytest.mark.parametrize(("ms", "text"), [
    ("604800000", "7 d"), ("86400000", "1 d"), ("43200000", "12 h"), ("1500", "1500 ms"),
    ("-1", "forever"), (None, "-"),
])
def test_retention_is_shown_in_days_hours_or_ms(ms: str | None, text: str) -> None:
    assert retention(ms) == text


def test_a_topic_set_as_the_catalog_says_has_no_problem() -> None:
    assert problems(broker_view(TopicCatalog("p", 4, 4))) == []


def test_co_partitioned_topics_with_different_counts_are_fatal() -> None:
    found = problems(broker_view(TopicCatalog("p", 4, 4), threads=6))
    fatal = [text for is_fatal, text in found if is_fatal]
    assert len(fatal) == 1
    assert "co-partitioned" in fatal[0]
    assert "p.threads=6" in fatal[0]


def test_a_missing_topic_is_fatal_and_a_different_count_alone_only_warns() -> None:
    catalog = TopicCatalog("p", 4, 4)
    found = problems(broker_view(catalog, deadletter=None, dispatch=2))
    assert (True, "p.deadletter is missing") in found
    warnings = [text for is_fatal, text in found if not is_fatal]
    assert warnings == ["p.dispatch.approval has 2 partitions, the catalog asks for 4 "
                        "(AGUI_PARTITIONS)"]


def test_a_changed_cleanup_policy_is_reported() -> None:
    states = broker_view(TopicCatalog("p", 4, 4))
    threads = next(s for s in states if s.spec.role == "threads")
    states[states.index(threads)] = TopicState(threads.spec, 4, {"cleanup.policy": "delete"})
    assert problems(states) == [
        (False, "p.threads: cleanup.policy is delete, the catalog asks for compact")]
