"""Stores open off the event loop: RocksDB's open (a WAL replayed after a kill) blocked
the loop of a consumer-service instance 8 s while it opened its 64 partitions' stores."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

import pytest

from services.state.dirs import StateDir
from services.state.disk import PartitionStore, lock, unlock

SLOW_OPEN_S = 0.3


@pytest.fixture
def slow_open(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """PartitionStore.open taking SLOW_OPEN_S, as RocksDB's does replaying a WAL; the
    threads it ran on."""
    ran_on: list[int] = []
    real = PartitionStore.open.__func__  # type: ignore[attr-defined]

    def slow(cls: type[PartitionStore], path: Path, partition: int) -> PartitionStore:
        ran_on.append(threading.get_ident())
        time.sleep(SLOW_OPEN_S)
        return real(cls, path, partition)  # type: ignore[no-any-return]

    monkeypatch.setattr(PartitionStore, "open", classmethod(slow))
    return ran_on


async def test_a_store_opens_while_the_event_loop_goes_on(
        tmp_path: Path, slow_open: list[int]) -> None:
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(ticking())
    try:
        store, _ = await StateDir(tmp_path, "s", 60.0).open_waiting(0)
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    store.close()
    assert slow_open
    assert threading.get_ident() not in slow_open
    assert ticks >= 5, f"the loop ticked {ticks} times in a {SLOW_OPEN_S} s open"


async def test_a_store_opened_for_a_caller_cancelled_meanwhile_is_closed(
        tmp_path: Path, slow_open: list[int]) -> None:
    before = PartitionStore.opened
    states = StateDir(tmp_path, "s", 60.0)
    opening = asyncio.create_task(states.open_waiting(0))
    await asyncio.sleep(SLOW_OPEN_S / 3)
    opening.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await opening
    if not opening.cancelled():  # opened before the cancel came: the caller closes it
        opening.result()[0].close()
    await asyncio.sleep(SLOW_OPEN_S * 3)
    held = lock(states.path(0))  # raises StoreLockedError when the store stayed open
    unlock(held)
    assert PartitionStore.opened == before
