"""A bounded buffer read by one task: what a run's stream and a decision waiter hold.

The fan-out fills it synchronously (``put`` never blocks: a full box says so
and the caller decides), and the one task that owns it drains it after
``wait``, which returns when something is buffered or when ``within_s``
seconds pass. A deque and at most one future, rather than an
``asyncio.Queue`` and ``asyncio.timeout``: one of each is made for every
request, and the queue's event, its per-get futures and the timeout's
context manager cost more CPU than the few records they carry.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


def _expire(wakeup: asyncio.Future[None]) -> None:
    if not wakeup.done():
        wakeup.set_result(None)


class Mailbox(Generic[T]):
    """At most ``limit`` items, in arrival order, for one reader."""

    __slots__ = ("_items", "_wakeup", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: deque[T] = deque()
        self._wakeup: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> bool:
        """Buffer ``item`` and wake the reader; False (nothing buffered) when full."""
        if len(self._items) >= self.limit:
            return False
        self._items.append(item)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        return True

    def put_all(self, items: list[T]) -> int:
        """``put`` the items in turn until the box is full: how many it took (the first)."""
        room = self.limit - len(self._items)
        if room <= 0 or not items:
            return 0
        taken = items if len(items) <= room else items[:room]
        self._items.extend(taken)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        return len(taken)

    async def wait(self, within_s: float) -> bool:
        """True once something is buffered; False after ``within_s`` seconds of nothing."""
        if self._items:
            return True
        loop = asyncio.get_running_loop()
        wakeup = self._wakeup = loop.create_future()
        timer = loop.call_later(within_s, _expire, wakeup)
        try:
            await wakeup
        finally:
            timer.cancel()
            self._wakeup = None
        return bool(self._items)

    def take(self) -> T:
        """The oldest item (IndexError when empty)."""
        return self._items.popleft()

    def take_all(self) -> list[T]:
        """Every buffered item, oldest first; the box is empty afterwards."""
        items = list(self._items)
        self._items.clear()
        return items
