"""The mailbox behind every stream and decision waiter: bounded, ordered, woken at once."""

from __future__ import annotations

import asyncio

import pytest

from services.consumer.mailbox import Mailbox

pytestmark = pytest.mark.unit


def test_items_come_out_in_arrival_order_and_the_box_is_bounded() -> None:
    box: Mailbox[int] = Mailbox(3)
    assert [box.put(i) for i in range(5)] == [True, True, True, False, False]
    assert len(box) == 3
    assert box.take() == 0
    assert box.put(9)
    assert box.take_all() == [1, 2, 9]
    assert len(box) == 0
    with pytest.raises(IndexError):
        box.take()


async def test_wait_returns_at_once_when_something_is_buffered() -> None:
    box: Mailbox[str] = Mailbox(4)
    box.put("a")
    assert await box.wait(3600)


async def test_a_put_wakes_the_waiting_reader() -> None:
    box: Mailbox[str] = Mailbox(4)
    reader = asyncio.create_task(box.wait(3600))
    await asyncio.sleep(0)
    assert not reader.done()
    box.put("a")
    assert await reader
    assert box.take_all() == ["a"]


async def test_wait_says_false_when_nothing_came() -> None:
    box: Mailbox[str] = Mailbox(4)
    assert not await box.wait(0.01)
    box.put("late")  # no reader waits now: buffered for the next wait
    assert await box.wait(0.01)


async def test_a_cancelled_wait_leaves_the_box_usable() -> None:
    box: Mailbox[str] = Mailbox(4)
    reader = asyncio.create_task(box.wait(3600))
    await asyncio.sleep(0)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert box.put("a")
    assert await box.wait(3600)


async def test_put_all_takes_what_fits_in_order_and_wakes_the_reader() -> None:
    box: Mailbox[int] = Mailbox(4)
    reader = asyncio.create_task(box.wait(3600))
    await asyncio.sleep(0)
    assert box.put_all([]) == 0
    await asyncio.sleep(0)
    assert not reader.done()
    assert box.put_all([1, 2, 3]) == 3
    assert await reader
    assert box.put_all([4, 5, 6]) == 1  # room for one: the first
    assert box.put_all([7]) == 0
    assert box.take_all() == [1, 2, 3, 4]
