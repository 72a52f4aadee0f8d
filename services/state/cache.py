"""The bounded cache in front of a store: decoded values, least recently used out first.

Sized in bytes, not entries (``AGUI_STATE_CACHE_MB`` for a whole process,
shared by its partitions): each value is charged what the caller estimates
it costs in memory (for a thread state, its encoded length times the
measured ratio of a decoded pydantic model to its JSON). A value larger
than the whole cache is not kept. Built on ``cachetools.LRUCache``; this
adds only the charge per entry and the hit and miss counts the metrics
report.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

V = TypeVar("V")


def _charge(entry: tuple[object, int]) -> int:
    return entry[1]


class ByteLRU(Generic[V]):
    """An LRU cache holding at most ``max_bytes`` of charged values."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lru: LRUCache[Hashable, tuple[V, int]] = LRUCache(max(max_bytes, 1),
                                                                getsizeof=_charge)
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> V | None:
        """The cached value (counted as a hit), or None (a miss)."""
        entry = self._lru.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        return entry[0]

    def put(self, key: Hashable, value: V, charge: int) -> None:
        """Keep ``value``, evicting the least recently used until it fits."""
        if charge > self.max_bytes:
            self._lru.pop(key, None)
            return
        self._lru[key] = (value, charge)

    def drop(self, key: Hashable) -> None:
        self._lru.pop(key, None)

    def drop_partition(self, partition: int) -> None:
        """Forget every key ``(partition, ...)``: a partition handed back."""
        for key in [k for k in self._lru if isinstance(k, tuple) and k and k[0] == partition]:
            del self._lru[key]

    @property
    def bytes(self) -> int:
        """What the kept values are charged, together."""
        return int(self._lru.currsize)

    def __len__(self) -> int:
        return len(self._lru)
