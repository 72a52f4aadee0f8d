"""``Heap``: survivors of a commit are frozen; a full pass, when due, reclaims cycles."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from services.gatekeeper.heap import Heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_settle_freezes_what_is_alive_and_leaves_cycles_until_a_full_pass_is_due() -> None:
    now = [0.0]
    heap = Heap(full_every_s=60, clock=lambda: now[0])
    heap.start()
    ref = cycle()  # garbage already, but only the cyclic collector can free it
    heap.settle()
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert ref() is not None, "a frozen cycle is out of every pass"
    now[0] = 30.0
    heap.settle()
    assert ref() is not None
    assert heap.full_collections == 0
    now[0] = 61.0
    heap.settle()
    assert ref() is None
    assert heap.full_collections == 1
    assert gc.get_freeze_count() > 0, "what is still alive is frozen again"


def test_collect_returns_what_it_freed() -> None:
    heap = Heap(full_every_s=60, clock=lambda: 0.0)
    ref = cycle()
    heap.settle()
    assert heap.collect() >= 2
    assert ref() is None
