"""``plan``: a delta only from a checkpoint the changelog accounts for; a full restore else."""

from __future__ import annotations

import pytest

from services.state.changelog import topic_id_of
from services.state.plan import plan

pytestmark = pytest.mark.unit


def test_no_store_is_a_full_restore_from_the_first_offset_with_the_callers_reason() -> None:
    p = plan(None, "no store on this machine", 3, 10)
    assert (p.full, p.start, p.end, p.reason) == (True, 3, 10, "no store on this machine")
    assert p.expected == 7


def test_checkpoint_inside_the_log_reads_only_what_follows_it() -> None:
    p = plan(7, "unused", 0, 10)
    assert (p.full, p.start, p.end) == (False, 7, 10)
    assert p.expected == 3


def test_checkpoint_at_the_end_reads_nothing() -> None:
    p = plan(10, "unused", 0, 10)
    assert (p.full, p.expected, p.reason) == (False, 0, "up to date")


def test_checkpoint_at_the_first_offset_is_a_delta_of_everything() -> None:
    p = plan(4, "unused", 4, 9)
    assert (p.full, p.start) == (False, 4)


def test_checkpoint_past_the_end_rebuilds() -> None:
    p = plan(11, "unused", 0, 10)
    assert (p.full, p.start, p.end) == (True, 0, 10)
    assert "past the changelog's end" in p.reason


def test_checkpoint_before_the_first_offset_rebuilds() -> None:
    p = plan(2, "unused", 5, 10)
    assert (p.full, p.start) == (True, 5)
    assert "gone" in p.reason


def test_empty_topic_with_a_checkpoint_beyond_it_rebuilds_to_nothing() -> None:
    p = plan(1, "unused", 0, 0)
    assert (p.full, p.expected) == (True, 0)


@pytest.mark.parametrize("checkpoint", [None, *range(0, 12)])
@pytest.mark.parametrize(("first", "end"), [(0, 0), (0, 10), (3, 10), (10, 10)])
def test_every_plan_reads_a_range_of_the_log_ending_at_its_end(
        checkpoint: int | None, first: int, end: int) -> None:
    p = plan(checkpoint, "why", first, end)
    assert p.end == end
    assert first <= p.start <= end or (p.full and p.start == first)
    assert p.full == (checkpoint is None or not first <= checkpoint <= end)


def test_a_store_of_another_topic_of_the_same_name_rebuilds_however_far_the_new_one_grew(
        ) -> None:
    p = plan(61, "unused", 0, 101, stored_topic="aa" * 16, topic="bb" * 16)
    assert (p.full, p.start, p.end) == (True, 0, 101)
    assert "deleted and created again" in p.reason


def test_a_store_that_does_not_say_its_topic_rebuilds_and_the_same_topic_is_a_delta() -> None:
    unsaid = plan(7, "unused", 0, 10, stored_topic=None, topic="aa" * 16)
    assert unsaid.full
    assert "does not say which topic" in unsaid.reason
    assert plan(7, "unused", 0, 10, stored_topic="aa" * 16, topic="aa" * 16).full is False


def test_a_broker_that_gives_no_topic_id_leaves_the_offsets_to_decide() -> None:
    assert plan(7, "unused", 0, 10, stored_topic=None, topic=None).full is False
    assert plan(7, "unused", 0, 10, stored_topic="aa" * 16, topic=None).full is False


class _OldBroker:
    """A client whose broker speaks no metadata version with topic ids."""

    def get_random_node(self) -> int:
        return 1

    async def send(self, node: int, request: object) -> object:
        raise NotImplementedError("Support for MetadataRequest v12 has not yet been added")


async def test_a_broker_without_topic_ids_leaves_the_restore_to_the_offsets(
        caplog: pytest.LogCaptureFixture) -> None:
    consumer = type("Consumer", (), {"_client": _OldBroker()})()
    assert await topic_id_of(consumer, "p.threads") is None
    assert "told only by its offsets" in caplog.text
