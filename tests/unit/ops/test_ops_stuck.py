"""``agui-relay stuck``'s pure parts: the duration option and what the report shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from ag_ui.core import Interrupt
from rich.console import Console

from contracts import OpenInterrupt, ThreadState
from services.cli.ops.stuck import parse_duration, print_report, report_json
from services.gatekeeper.census import examine

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("5m", 300), ("1.5h", 5400), ("2D", 172_800), (" 10 m ", 600),
])
def test_durations_read_with_or_without_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "5 minutes", "-5m", "5w", "m"])
def test_other_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)


def states() -> list[ThreadState]:
    late = Interrupt(id="i-late", reason="approval", expires_at="2026-03-01T11:00:00Z")
    soon = Interrupt(id="i-soon", reason="approval", expires_at="2026-03-01T13:00:00Z")
    return [
        ThreadState(thread_id="t-long", status="running", agent="scripted", run_id="r9",
                    run_started_at=NOW - timedelta(minutes=7), updated_at=NOW),
        ThreadState(thread_id="t-ok", status="running", run_id="r1",
                    run_started_at=NOW - timedelta(minutes=1)),
        ThreadState(thread_id="t-wait", status="interrupted", run_id="r2",
                    open_interrupts=[OpenInterrupt(run_id="r2", interrupt=late),
                                     OpenInterrupt(run_id="r2", interrupt=soon)]),
    ]


def test_the_json_report_has_the_gauges_numbers_and_each_stuck_thread() -> None:
    limit = timedelta(minutes=5)
    counts, stuck = examine(states(), NOW, limit)
    doc = report_json(counts, stuck, NOW, limit)
    assert (doc["runningTooLong"], doc["expiredInterrupts"], doc["openInterrupts"]) == (1, 1, 2)
    assert doc["runningLongerThanS"] == 300
    long_run, waiting = doc["threads"]
    assert long_run == {"threadId": "t-long", "status": "running", "agent": "scripted",
                        "runId": "r9", "runStartedAt": "2026-03-01T11:53:00+00:00",
                        "runningForS": 420.0, "expiredInterrupts": [],
                        "updatedAt": "2026-03-01T12:00:00+00:00"}
    assert waiting["threadId"] == "t-wait"
    assert waiting["runningForS"] is None
    assert waiting["expiredInterrupts"] == [{"id": "i-late", "expiresAt": "2026-03-01T11:00:00Z"}]


def test_the_table_names_the_limit_the_counts_and_the_threads() -> None:
    limit = timedelta(minutes=5)
    console = Console(width=200, record=True)
    print_report(console, *examine(states(), NOW, limit), limit, [])
    text = console.export_text()
    assert "1 of 2 running threads running longer than 5m" in text
    assert "1 of 2 open interrupts past their expiry" in text
    assert "t-long" in text
    assert "7m" in text
    assert "i-late (2026-03-01T11:00:00Z)" in text
    assert "t-ok" not in text
