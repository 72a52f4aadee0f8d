"""Judging a failed transaction by the group's committed offsets once it is settled."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gatekeeper.settle import judge

pytestmark = pytest.mark.unit

BEFORE = (10, 20)


@pytest.mark.parametrize(
    ("attempted", "found", "outcome"),
    [
        ((14, 25), (14, 25), "committed"),  # the commit's response was lost
        ((14, 25), (10, 20), "aborted"),  # never committed; the new producer aborted it
        ((10, 25), (10, 25), "committed"),  # only events moved
        ((14, 20), (10, 20), "aborted"),
        ((14, 25), (17, 30), "unknown"),  # someone else moved the offsets
        ((14, 25), (14, 20), "unknown"),  # half of the offsets: not a transaction's outcome
        ((10, 20), (10, 20), "unknown"),  # the transaction carried the same offsets
    ],
)
def test_the_offsets_tell_what_happened(
    attempted: tuple[int, int], found: tuple[int, int], outcome: str
) -> None:
    assert judge(BEFORE, attempted, found) == outcome


offsets = st.tuples(st.integers(0, 3), st.integers(0, 3))


@given(offsets, offsets, offsets)
def test_only_offsets_that_tell_the_two_apart_decide(
    before: tuple[int, int], attempted: tuple[int, int], found: tuple[int, int]
) -> None:
    outcome = judge(before, attempted, found)
    if outcome == "committed":
        assert found == attempted != before
    elif outcome == "aborted":
        assert found == before != attempted
    else:
        assert attempted == before or found not in (before, attempted)
