"""When the next transaction may begin, and how long a fetch waits to fill (batching)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.gatekeeper.pacing import wait_s
from services.gatekeeper.settings import BATCH_FETCH_BYTES, IDLE_FETCH_WAIT_MS, GatekeeperSettings

pytestmark = pytest.mark.unit


def test_the_first_transaction_and_an_interval_of_zero_never_wait() -> None:
    assert wait_s(None, 100.0, 0.02) == 0.0
    assert wait_s(100.0, 100.0, 0.0) == 0.0


def test_a_transaction_waits_out_what_is_left_of_the_interval() -> None:
    assert wait_s(100.0, 100.005, 0.02) == pytest.approx(0.015)


def test_past_the_interval_nothing_waits() -> None:
    assert wait_s(100.0, 100.02, 0.02) == 0.0
    assert wait_s(100.0, 107.0, 0.02) == 0.0


def _settings(**env: str) -> GatekeeperSettings:
    return GatekeeperSettings.model_validate(env)


def test_without_batching_a_fetch_returns_with_the_first_record() -> None:
    s = _settings()
    assert (s.fetch_min_bytes, s.fetch_wait_ms, s.pacing_s) == (1, IDLE_FETCH_WAIT_MS, 0.0)
    assert s.catch_up_ms == s.events_wait_ms


def test_batching_makes_fetches_wait_to_fill_and_paces_transactions_alike() -> None:
    s = _settings(AGUI_GATEKEEPER_BATCH_MS="100")
    assert (s.fetch_min_bytes, s.fetch_wait_ms) == (BATCH_FETCH_BYTES, 100)
    assert s.pacing_s == pytest.approx(0.1)
    # held requests wait for ``runs`` as long as before, plus what a fetch may hold it
    assert s.catch_up_ms == s.events_wait_ms + 100


def test_the_longer_of_batching_and_the_transaction_interval_paces() -> None:
    assert _settings(AGUI_GATEKEEPER_BATCH_MS="50",
                     AGUI_GATEKEEPER_TRANSACTION_INTERVAL_MS="200").pacing_s == pytest.approx(0.2)
    assert _settings(AGUI_GATEKEEPER_BATCH_MS="300",
                     AGUI_GATEKEEPER_TRANSACTION_INTERVAL_MS="20").pacing_s == pytest.approx(0.3)


@pytest.mark.parametrize("value", ["-1", "1001", "soon"])
def test_a_batch_outside_0_to_1000_ms_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="AGUI_GATEKEEPER_BATCH_MS"):
        _settings(AGUI_GATEKEEPER_BATCH_MS=value)
