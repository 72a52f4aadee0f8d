"""Where a replay starts after ``Last-Event-ID``, when there is nothing left (204), and
when what comes next is gone from the log (410)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.consumer.ordering import missing_before
from services.consumer.problems import Gone
from services.consumer.replay import first_after, opening
from services.consumer.streams import Delivery

pytestmark = pytest.mark.unit

RUN = [Delivery(0, "RUN_STARTED", b"0"), None, Delivery(1, "TEXT_MESSAGE_START", b"1"),
       Delivery(2, "RUN_FINISHED", b"2")]


async def scan(items: list[Delivery | None]) -> AsyncIterator[Delivery | None]:
    for item in items:
        yield item


async def test_without_last_event_id_the_first_record_starts_it() -> None:
    assert await first_after(scan(RUN), None) == (RUN[0], False)
    assert await first_after(scan([]), None) == (None, False)


async def test_the_first_record_past_last_event_id_starts_it() -> None:
    assert await first_after(scan(RUN), 0) == (RUN[2], False)
    assert await first_after(scan(RUN), 1) == (RUN[3], False)


@pytest.mark.parametrize("after", [2, 3, 10**9])
async def test_at_or_past_the_terminal_event_the_run_has_ended(after: int) -> None:
    assert await first_after(scan(RUN), after) == (None, True)


async def test_a_late_error_after_the_end_is_still_sent() -> None:
    late = [*RUN, Delivery(3, "RUN_ERROR", b"3")]
    assert await first_after(scan(late), 2) == (late[4], True)
    assert await first_after(scan(late), 3) == (None, True)


async def test_a_run_without_its_end_on_the_topic_has_not_ended() -> None:
    assert await first_after(scan(RUN[:3]), 5) == (None, False)


@pytest.mark.parametrize(("after", "seq", "gone"), [
    (None, 0, None), (None, 5, range(0, 5)), (-1, 0, None), (-1, 2, range(0, 2)),
    (2, 3, None), (2, 5, range(3, 5)), (4, 5, None)])
def test_a_first_record_past_the_next_one_means_the_ones_between_are_gone(
        after: int | None, seq: int, gone: range | None) -> None:
    assert missing_before(after, seq) == gone


@pytest.mark.parametrize("after", [None, 2])
async def test_a_replay_whose_next_events_are_gone_is_answered_410(after: int | None) -> None:
    cut = [Delivery(5, "TOOL_CALL_ARGS", b"5"), Delivery(6, "RUN_FINISHED", b"6")]
    with pytest.raises(Gone) as raised:
        await opening(scan(cut), after, live=False, thread_id="t", run_id="r")
    assert raised.value.code == "events_expired"
    assert raised.value.status == 410
    assert "'r'" in raised.value.detail
    assert "5 onwards" in raised.value.detail
    assert raised.value.extra == {"firstAvailableId": 5}


async def test_a_replay_from_what_is_left_streams_it() -> None:
    cut = [Delivery(5, "TOOL_CALL_ARGS", b"5"), Delivery(6, "RUN_FINISHED", b"6")]
    preface = await opening(scan(cut), 4, live=False, thread_id="t", run_id="r")
    assert preface is not None
    assert [d async for d in preface] == cut
