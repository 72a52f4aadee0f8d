"""Where a process keeps its partitions' stores, and when it deletes them.

``<AGUI_STATE_DIR>/<store kind>/<changelog topic>/p<partition>``, one
directory per partition, each with its lock file beside it: the changelog's
name (prefix included) is part of the path, so two deployments sharing a
state directory never read each other's stores. Opening a partition reuses
what is there when it reads as this store and wipes it otherwise (the
reason is returned for the restore's log line). A partition handed back is
closed at once (its lock released, so its next owner on this machine may
open it) and deleted after ``grace_s`` unless it was opened again
meanwhile: a partition that comes back soon, as after a rolling restart or
a short rebalance, restores only the delta. Directories found at start that
no one opens are deleted after the same grace. Deleting takes the lock
first, so a store another process opened is never deleted under it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

from services.state.disk import (
    PartitionStore,
    StoreLockedError,
    StoreUnusableError,
    lock,
    unlock,
    wipe,
)

log = logging.getLogger(__name__)

PARTITION_DIR = re.compile(r"p(\d+)")
LOCK_WAIT_S = 60.0
"""How long a new owner waits for the previous owner on this machine to close a store."""
LOCK_POLL_S = 0.1


class StateDir:
    """The stores of one kind (``name``) this process opens, under ``root``."""

    def __init__(self, root: Path, name: str, grace_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.home = root / name
        self.grace_s = grace_s
        self._clock = clock
        self.retired: dict[int, float] = {}
        """Partition → when it was handed back (or found unowned at start)."""
        self._timer: asyncio.TimerHandle | None = None

    def path(self, partition: int) -> Path:
        return self.home / f"p{partition}"

    def start(self) -> None:
        """Count every store left from an earlier run as handed back now."""
        self.home.mkdir(parents=True, exist_ok=True)
        now = self._clock()
        for child in self.home.iterdir():
            match = PARTITION_DIR.fullmatch(child.name)
            if match:
                self.retired.setdefault(int(match.group(1)), now)
        self._schedule()

    def open(self, partition: int) -> tuple[PartitionStore, str | None]:
        """The partition's store, and why it was wiped (None: reused as found).

        Raises ``StoreLockedError`` when another process holds it.
        """
        self.retired.pop(partition, None)
        return self._open_store(partition)

    def _open_store(self, partition: int) -> tuple[PartitionStore, str | None]:
        """``open`` without touching ``retired`` (safe off the event loop)."""
        path = self.path(partition)
        existed = path.exists()
        try:
            store = PartitionStore.open(path, partition)
        except StoreUnusableError as exc:
            log.warning("state store %s is unusable, rebuilding it: %s", path, exc)
            return PartitionStore.open_fresh(path, partition), str(exc)
        if not existed:
            return store, "no store on this machine"
        if store.checkpoint is None:
            return store, "the store holds no checkpoint"
        return store, None

    async def open_waiting(self, partition: int, timeout_s: float = LOCK_WAIT_S
                           ) -> tuple[PartitionStore, str | None]:
        """``open``, waiting while another process on this machine still holds the store
        (its owner before a rebalance, closing it); ``StoreLockedError`` after ``timeout_s``.

        The store opens in a worker thread: RocksDB's open (a WAL replayed after a kill)
        blocked the event loop 8 s for 64 partitions."""
        deadline = self._clock() + timeout_s
        while True:
            self.retired.pop(partition, None)
            try:
                return await _off_loop(self._open_store, partition)
            except StoreLockedError:
                if self._clock() >= deadline:
                    raise
                await asyncio.sleep(LOCK_POLL_S)

    def release(self, partition: int, store: PartitionStore) -> None:
        """Close a partition handed back; delete it after the grace period."""
        store.close()
        self.retired[partition] = self._clock()
        self._schedule()

    def sweep(self) -> list[int]:
        """Delete the stores whose grace period has passed; returns their partitions."""
        now = self._clock()
        deleted = []
        for partition, since in sorted(self.retired.items()):
            if now - since < self.grace_s:
                continue
            del self.retired[partition]
            path = self.path(partition)
            try:
                held = lock(path)
            except StoreLockedError:
                continue  # another process owns it now: its store, not ours to delete
            try:
                wipe(path)
            finally:
                unlock(held)
            deleted.append(partition)
            log.info("state store %s deleted: partition %d not owned for %.0f s",
                     path, partition, now - since)
        self._schedule()
        return deleted

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        """Sweep again when the next grace period ends (only inside an event loop)."""
        self.stop()
        if not self.retired:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        due = min(self.retired.values()) + self.grace_s - self._clock()
        self._timer = loop.call_later(max(due, 0.0) + 0.01, self.sweep)


async def _off_loop(opener: Callable[[int], tuple[PartitionStore, str | None]],
                    partition: int) -> tuple[PartitionStore, str | None]:
    """``opener(partition)`` in a worker thread; when the caller is cancelled meanwhile,
    the store it opens is closed once open (its lock would stay held otherwise)."""
    opening = asyncio.ensure_future(asyncio.to_thread(opener, partition))
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_close_opened)
        raise


def _close_opened(opening: asyncio.Future[tuple[PartitionStore, str | None]]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result()[0].close()
