"""When the next transaction may begin: the interval since the last one began."""

from __future__ import annotations

import pytest

from services.gatekeeper.pacing import wait_s

pytestmark = pytest.mark.unit


def test_the_first_transaction_and_an_interval_of_zero_never_wait() -> None:
    assert wait_s(None, 100.0, 0.02) == 0.0
    assert wait_s(100.0, 100.0, 0.0) == 0.0


def test_a_transaction_waits_out_what_is_left_of_the_interval() -> None:
    assert wait_s(100.0, 100.005, 0.02) == pytest.approx(0.015)


def test_past_the_interval_nothing_waits() -> None:
    assert wait_s(100.0, 100.02, 0.02) == 0.0
    assert wait_s(100.0, 107.0, 0.02) == 0.0
