"""``Heap``: no collection on allocation counts; one pass when due, survivors frozen."""

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
    yield
    gc.unfreeze()
    gc.enable()


def cycle() -> weakref.ref[Node]:
    """A two-node cycle, garbage at once: only the cyclic collector can free it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_cycles_wait_for_the_pass_that_is_due() -> None:
    now = [0.0]
    heap = Heap(full_every_s=60, clock=lambda: now[0])
    heap.start()
    assert not gc.isenabled()
    ref = cycle()
    for _ in range(100_000):  # far past any allocation threshold
        Node()
    now[0] = 30.0
    heap.settle()
    assert ref() is not None
    assert heap.passes == 0
    now[0] = 61.0
    heap.settle()
    assert ref() is None
    assert heap.passes == 1


def test_survivors_of_a_pass_are_frozen_out_of_later_passes() -> None:
    heap = Heap(full_every_s=60, clock=lambda: 0.0)
    heap.start()
    kept = Node()
    heap.collect()
    assert gc.get_freeze_count() > 0
    frozen = gc.get_freeze_count()
    ref = cycle()
    assert heap.collect() >= 2
    assert ref() is None
    assert gc.get_freeze_count() >= frozen
    assert kept.other is None


def test_freeze_keeps_restored_objects_out_of_passes() -> None:
    heap = Heap(full_every_s=60, clock=lambda: 0.0)
    ref = cycle()
    heap.freeze()
    gc.collect()
    assert ref() is not None, "a frozen cycle is never reclaimed: only live data is frozen"


def test_stop_turns_automatic_collection_back_on() -> None:
    heap = Heap(full_every_s=60)
    heap.start()
    heap.freeze()
    heap.stop()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
