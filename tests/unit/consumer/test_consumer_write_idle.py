"""The watch that closes a connection whose client reads nothing: armed only while paused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.consumer.write_idle import WriteWatch, closed_idle, mark_closed_idle

pytestmark = pytest.mark.unit

LIMIT_S = 0.01


class Transport:
    """Reports the unsent bytes from a script (the last value repeats)."""

    def __init__(self, *sizes: int) -> None:
        self.sizes = list(sizes)
        self.looks = 0
        self.closing = False

    def get_write_buffer_size(self) -> int:
        self.looks += 1
        return self.sizes.pop(0) if len(self.sizes) > 1 else self.sizes[0]

    def is_closing(self) -> bool:
        return self.closing


def watch(transport: Transport, fired: asyncio.Event) -> WriteWatch:
    loop = asyncio.get_running_loop()
    return WriteWatch(loop, transport, LIMIT_S, fired.set)  # type: ignore[arg-type]


async def test_a_paused_connection_that_makes_no_progress_is_closed() -> None:
    fired = asyncio.Event()
    transport = Transport(70_000)
    w = watch(transport, fired)
    w.paused()
    assert w.armed
    await asyncio.wait_for(fired.wait(), 10)
    assert transport.looks == 2  # when paused, and one limit later
    assert not w.armed


async def test_a_client_that_read_something_gets_another_limit() -> None:
    fired = asyncio.Event()
    transport = Transport(90_000, 80_000, 80_000, 80_000)
    w = watch(transport, fired)
    w.paused()
    await asyncio.wait_for(fired.wait(), 10)
    assert transport.looks == 4  # paused (90k), went down (80k) and re-armed (80k), stalled


async def test_writes_that_resume_disarm_the_watch() -> None:
    fired = asyncio.Event()
    transport = Transport(70_000)
    w = watch(transport, fired)
    w.paused()
    w.paused()  # already armed: one timer
    w.resumed()
    assert not w.armed
    await asyncio.sleep(LIMIT_S * 5)
    assert not fired.is_set()
    assert transport.looks == 1


async def test_a_connection_already_closing_is_left_alone() -> None:
    fired = asyncio.Event()
    transport = Transport(70_000)
    w = watch(transport, fired)
    w.paused()
    transport.closing = True
    await asyncio.sleep(LIMIT_S * 5)
    assert not fired.is_set()
    assert not w.armed


@pytest.mark.parametrize("scope", [{}, {"extensions": None}, {"extensions": {"x": {}}}])
def test_the_scope_tells_an_idle_close_from_the_clients_own(scope: dict[str, Any]) -> None:
    assert not closed_idle(scope)
    mark_closed_idle(scope)
    assert closed_idle(scope)
