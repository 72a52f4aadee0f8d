"""CancelMemo: a cancel that arrived before its dispatch is taken once, memory bounded."""

from __future__ import annotations

import pytest

from services.producer.worker import CancelMemo

pytestmark = pytest.mark.unit


def test_taken_once_and_bounded() -> None:
    memo = CancelMemo(limit=2)
    memo.remember(("t", "a"))
    memo.remember(("t", "b"))
    memo.remember(("t", "c"))
    assert not memo.take(("t", "a"))  # evicted, oldest first
    assert memo.take(("t", "b"))
    assert not memo.take(("t", "b"))
    assert memo.take(("t", "c"))


def test_a_cancel_is_for_its_own_threads_run_only() -> None:
    """Run ids are unique within a thread only: ``r1`` on another thread is another run."""
    memo = CancelMemo()
    memo.remember(("t1", "r1"))
    assert not memo.take(("t2", "r1"))
    assert memo.take(("t1", "r1"))
