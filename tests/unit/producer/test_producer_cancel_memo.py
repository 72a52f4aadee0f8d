"""CancelMemo: a cancel that arrived before its dispatch is taken once, memory bounded."""

from __future__ import annotations

import pytest

from services.producer.worker import CancelMemo

pytestmark = pytest.mark.unit


def test_taken_once_and_bounded() -> None:
    memo = CancelMemo(limit=2)
    memo.remember("a")
    memo.remember("b")
    memo.remember("c")
    assert not memo.take("a")  # evicted, oldest first
    assert memo.take("b")
    assert not memo.take("b")
    assert memo.take("c")
