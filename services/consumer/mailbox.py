"""A bounded buffer read by one task: what a run's stream and a decision waiter hold.

The fan-out fills it synchronously (``put`` never blocks: a full box says so
and the caller decides), and the one task that owns it drains it after
``wait``, which returns when something is buffered or when ``within_s``
seconds pass. A deque and at most one future, rather than an
``asyncio.Queue`` and ``asyncio.timeout``: one of each is made for every
request, and the queue's event, its per-get futures and the timeout's
context manager cost more CPU than the few records they carry.

A box may also be bounded in bytes (``max_bytes``, each item weighed by
``size_of``): a run's stream counted events only, so a client reading nothing
had its instance hold up to ``AGUI_STREAM_QUEUE`` events of up to a record's
limit each (2 GiB at the defaults) for its one stream.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def _expire(wakeup: asyncio.Future[None]) -> None:
    if not wakeup.done():
        wakeup.set_result(None)


class Mailbox(Generic[T]):
    """At most ``limit`` items (and, with ``max_bytes``, at most that many bytes of them),
    in arrival order, for one reader."""

    __slots__ = ("_bytes", "_items", "_wakeup", "limit", "max_bytes", "size_of")

    def __init__(self, limit: int, max_bytes: int = 0,
                 size_of: Callable[[T], int] | None = None) -> None:
        if max_bytes and size_of is None:
            raise ValueError("a box bounded in bytes needs size_of")
        self.limit = limit
        self.max_bytes = max_bytes
        """0: bounded in items only."""
        self.size_of = size_of
        self._bytes = 0
        self._items: deque[T] = deque()
        self._wakeup: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def held_bytes(self) -> int:
        """The bytes of what is buffered (0 when the box is not bounded in bytes)."""
        return self._bytes

    def put(self, item: T) -> bool:
        """Buffer ``item`` and wake the reader; False (nothing buffered) when full."""
        return self.put_all([item]) == 1

    def put_all(self, items: list[T], nbytes: int = -1) -> int:
        """``put`` the items in turn until the box is full: how many it took (the first).
        ``nbytes``: what the items weigh together, when the caller knows it already."""
        room = self.limit - len(self._items)
        if room <= 0 or not items:
            return 0
        if self.max_bytes:
            taken = self._fitting(items, room, nbytes)
            if not taken:
                return 0
        else:
            taken = items if len(items) <= room else items[:room]
        self._items.extend(taken)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        return len(taken)

    def _fitting(self, items: list[T], room: int, nbytes: int) -> list[T]:
        """The first of ``items`` that fit in ``room`` items and the bytes left (counted)."""
        size_of = self.size_of
        assert size_of is not None
        left = self.max_bytes - self._bytes
        if nbytes < 0:
            nbytes = sum(map(size_of, items))
        if len(items) <= room and nbytes <= left:
            self._bytes += nbytes
            return items
        count = weight = 0
        for item in items[:room]:
            size = size_of(item)
            if weight + size > left:
                break
            weight += size
            count += 1
        self._bytes += weight
        return items[:count]

    def wake(self) -> None:
        """Wake the reader with nothing new: something else about its stream changed
        (it fell behind on an item that did not fit, and must go to the log)."""
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

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
        item = self._items.popleft()
        if self.size_of is not None:
            self._bytes -= self.size_of(item)
        return item

    def take_all(self) -> list[T]:
        """Every buffered item, oldest first; the box is empty afterwards."""
        items = list(self._items)
        self._items.clear()
        self._bytes = 0
        return items
