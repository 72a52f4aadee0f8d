"""``ByteLRU``: bounded by charged bytes, least recently used out first, hits counted."""

from __future__ import annotations

import pytest

from services.state.cache import ByteLRU

pytestmark = pytest.mark.unit


def test_values_are_evicted_least_recently_used_first_once_the_bytes_are_spent() -> None:
    cache: ByteLRU[str] = ByteLRU(100)
    cache.put((0, "a"), "A", 40)
    cache.put((0, "b"), "B", 40)
    assert cache.get((0, "a")) == "A"  # a is now the most recent
    cache.put((0, "c"), "C", 40)
    assert cache.get((0, "b")) is None
    assert cache.get((0, "a")) == "A"
    assert cache.get((0, "c")) == "C"
    assert cache.bytes == 80


def test_hits_and_misses_are_counted() -> None:
    cache: ByteLRU[str] = ByteLRU(100)
    cache.put("k", "v", 1)
    cache.get("k")
    cache.get("k")
    cache.get("missing")
    assert (cache.hits, cache.misses) == (2, 1)


def test_a_value_larger_than_the_cache_is_not_kept_and_replaces_nothing() -> None:
    cache: ByteLRU[str] = ByteLRU(10)
    cache.put("small", "s", 5)
    cache.put("big", "b", 11)
    assert cache.get("big") is None
    assert cache.get("small") == "s"


def test_a_zero_byte_cache_keeps_nothing() -> None:
    cache: ByteLRU[str] = ByteLRU(0)
    cache.put("k", "v", 1)
    assert cache.get("k") is None
    assert len(cache) == 0


def test_a_partitions_keys_are_dropped_together() -> None:
    cache: ByteLRU[str] = ByteLRU(100)
    cache.put((1, "a"), "A", 1)
    cache.put((1, "b"), "B", 1)
    cache.put((2, "a"), "C", 1)
    cache.drop_partition(1)
    assert len(cache) == 1
    assert cache.get((2, "a")) == "C"
