"""Where a replay starts after ``Last-Event-ID``, and when there is nothing left (204)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.consumer.replay import first_after
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
