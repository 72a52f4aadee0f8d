"""Default interrupt expiry: the TTL parser, the per-agent settings, and the stamp on the wire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ag_ui.core import Interrupt
from producer_support import assert_conformant, outcome_of, run_agent
from pydantic import ValidationError

from services.agui.expiry import is_expired, read_expiry
from services.agui.jsdate import to_epoch_ms
from services.producer.context import RunContext
from services.producer.settings import ProducerSettings
from services.producer.ttl import (
    DurationError,
    check_settings,
    deadline,
    interrupt_ttls,
    parse_duration,
    stamped,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 2, 1, 30, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize(("raw", "seconds"), [
    ("90", 90), ("1.5", 1.5), ("90s", 90), ("15m", 900), ("24h", 86400), ("7d", 604800),
    ("500ms", 0.5), (" 2H ", 7200), ("10 m", 600),
])
def test_durations_in_seconds_or_with_a_unit(raw: str, seconds: float) -> None:
    assert parse_duration(raw) == timedelta(seconds=seconds)


@pytest.mark.parametrize("raw", ["", "abc", "-5", "5x", "1h30m", "0", "0s", "1e3", "inf",
                                 "nan", "3651d", "s", "5 minutes"])
def test_garbage_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(DurationError, match="AGUI_DEFAULT_INTERRUPT_TTL_X"):
        parse_duration(raw, "AGUI_DEFAULT_INTERRUPT_TTL_X")


def test_each_agent_takes_its_own_ttl_else_the_default_else_none() -> None:
    env = {"AGUI_DEFAULT_INTERRUPT_TTL": "15m", "AGUI_DEFAULT_INTERRUPT_TTL_MY_AGENT": "30s"}
    assert interrupt_ttls(["my-agent", "other"], env) == {
        "my-agent": timedelta(seconds=30), "other": timedelta(minutes=15)}
    assert interrupt_ttls(["a"], {}) == {"a": None}
    assert interrupt_ttls(["a"], {"AGUI_DEFAULT_INTERRUPT_TTL_A": "2h"}) == {
        "a": timedelta(hours=2)}


def test_settings_refuse_any_ttl_variable_that_is_no_duration(
        monkeypatch: pytest.MonkeyPatch) -> None:
    check_settings({"AGUI_DEFAULT_INTERRUPT_TTL": "7d", "AGUI_OTHER": "x"})
    monkeypatch.setenv("AGUI_DEFAULT_INTERRUPT_TTL_BILLING", "soon")
    with pytest.raises(ValidationError, match="AGUI_DEFAULT_INTERRUPT_TTL_BILLING='soon'"):
        ProducerSettings()
    monkeypatch.setenv("AGUI_DEFAULT_INTERRUPT_TTL_BILLING", "90s")
    ProducerSettings()


def test_the_stamp_is_iso_utc_with_milliseconds_read_back_exactly_by_js_date() -> None:
    stamp = deadline(NOW, timedelta(minutes=15))
    assert stamp == "2026-12-02T01:45:00.123Z"
    assert read_expiry(stamp).epoch_ms == to_epoch_ms(NOW + timedelta(minutes=15))
    assert not is_expired(stamp, NOW + timedelta(minutes=15) - timedelta(milliseconds=1))
    assert is_expired(stamp, NOW + timedelta(minutes=15))


def test_an_interrupt_with_its_own_expiry_keeps_it() -> None:
    own = Interrupt(id="i", reason="r", expires_at="2030-01-01T00:00:00Z")
    assert stamped(own, "2026-01-01T00:00:00.000Z") is own
    bare = stamped(Interrupt(id="j", reason="r"), "2026-01-01T00:00:00.000Z")
    assert bare.model_dump(by_alias=True, exclude_none=True)["expiresAt"] == (
        "2026-01-01T00:00:00.000Z")


async def interrupting(inp: Any, ctx: RunContext) -> None:
    ctx.interrupt("tool_approval", id="bare", message="ok?")
    ctx.interrupt("tool_approval", id="own", expires_at="2030-01-01T00:00:00Z")


async def test_the_runtime_stamps_the_outcome_and_the_report_alike() -> None:
    ended = NOW + timedelta(seconds=3)
    sink = await run_agent(interrupting, interrupt_ttl=timedelta(hours=24), clock=lambda: ended)
    assert_conformant(sink)
    wire = {i["id"]: i.get("expiresAt") for i in outcome_of(sink)["interrupts"]}
    assert wire == {"bare": "2026-12-03T01:30:03.123Z", "own": "2030-01-01T00:00:00Z"}
    assert sink.report is not None  # what the checkpoint records as still open
    assert {i.id: i.expires_at for i in sink.report.open_interrupts} == wire


async def test_without_a_ttl_nothing_is_stamped() -> None:
    sink = await run_agent(interrupting, clock=lambda: NOW)
    wire = {i["id"]: i.get("expiresAt") for i in outcome_of(sink)["interrupts"]}
    assert wire == {"bare": None, "own": "2030-01-01T00:00:00Z"}


async def test_interrupts_carried_from_an_earlier_run_are_not_restamped() -> None:
    carried = Interrupt(id="old", reason="r")

    async def idle(inp: Any, ctx: RunContext) -> None:
        return None

    sink = await run_agent(idle, open_interrupts=[carried], interrupt_ttl=timedelta(hours=1),
                           clock=lambda: NOW)
    assert [i.get("expiresAt") for i in outcome_of(sink)["interrupts"]] == [None]
