"""Pretty lines: durations, time left before expiry, event and decision lines."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.cli.ops.render import (
    clip,
    clock,
    duration,
    event_lines,
    record_lines,
    time_left,
)
from services.kafka.records import OpsRecord

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def ev(body: dict[str, Any], run: str = "run-1") -> OpsRecord:
    headers = {"agui-run-id": run, "agui-event-type": body["type"], "agui-agent": "approval",
               "agui-seq": "3"}
    return OpsRecord("p.events", "events", 2, 7, 1_764_504_000_123, "thread-1", headers, body)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (42, "42s"), (60, "1m"), (192, "3m 12s"), (180, "3m"), (3600, "1h"),
    (7500, "2h 5m"), (90061, "1d 1h"), (-185, "3m 5s"),
])
def test_duration_shows_two_largest_units(seconds: float, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(("expires_at", "text"), [
    (None, "no expiry"),
    ("2026-11-30T12:05:00Z", "expires in 5m"),
    ("2026-11-30T11:57:00Z", "expired 3m ago"),
    ("2026-11-30T12:00:00Z", "expired 0s ago"),  # the instant itself is expired
    ("2026-11-30T13:00:00+02:00", "expired 1h ago"),
    ("next tuesday", "never expires (unparseable expiresAt 'next tuesday')"),
])
def test_time_left_reads_expiry_like_the_gatekeeper(expires_at: str | None, text: str) -> None:
    assert time_left(expires_at, NOW) == text


def test_clip_flattens_and_cuts() -> None:
    assert clip("a\n  b", 10) == "a b"
    assert clip("x" * 20, 10) == "x" * 9 + "…"


def test_clock_is_utc_with_milliseconds() -> None:
    assert clock(1_764_504_000_123) == "12:00:00.123"


def test_interrupt_outcome_is_expanded_one_line_per_interrupt() -> None:
    body = {"type": "RUN_FINISHED", "threadId": "thread-1", "runId": "run-1",
            "outcome": {"type": "interrupt", "interrupts": [
                {"id": "approve-1", "reason": "tool_approval", "message": "Delete 3 files?",
                 "expiresAt": "2026-11-30T12:10:00Z", "toolCallId": "call-1"},
                {"id": "ask-2", "reason": "choice", "expiresAt": "2026-11-30T11:00:00Z",
                 "subagentRunId": "sub-1"},
            ]}}
    lines = [line.plain for line in event_lines(ev(body), NOW)]
    assert len(lines) == 3
    assert "thread-1" in lines[0]
    assert "run-1" in lines[0]
    assert "RUN_FINISHED" in lines[0]
    assert "interrupt (2)" in lines[0]
    assert "approve-1" in lines[1]
    assert "reason=tool_approval" in lines[1]
    assert "Delete 3 files?" in lines[1]
    assert "expires in 10m" in lines[1]
    assert "tool=call-1" in lines[1]
    assert "ask-2" in lines[2]
    assert "expired 1h ago" in lines[2]
    assert "subagent=sub-1" in lines[2]


def test_run_started_shows_resume_entries_and_agent() -> None:
    body = {"type": "RUN_STARTED", "threadId": "thread-1", "runId": "run-2",
            "input": {"threadId": "thread-1", "runId": "run-2", "messages": [{}, {}],
                      "resume": [{"interruptId": "approve-1", "status": "resolved"}]}}
    (line,) = event_lines(ev(body, "run-2"), NOW)
    assert "resume approve-1=resolved" in line.plain
    assert "2 messages in" in line.plain
    assert "agent=approval" in line.plain


@pytest.mark.parametrize(("body", "needle"), [
    ({"type": "RUN_ERROR", "message": "boom", "code": "worker_lost"}, "worker_lost: boom"),
    ({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hello"}, "'hello'"),
    ({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "delete_files"},
     "delete_files c1"),
    ({"type": "TOOL_CALL_RESULT", "messageId": "m", "toolCallId": "c1", "content": "done"},
     "c1 → done"),
    ({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a", "value": 1}]}, "add /a"),
    ({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
      "outcome": {"type": "cancelled"}}, "cancelled"),
    ({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}, "success"),
    ({"type": "SUBAGENT_FINISHED", "subagentRunId": "s1", "name": "checker",
      "outcome": {"type": "suspended", "interruptIds": ["i1"]}}, "s1 checker suspended [i1]"),
])
def test_event_details(body: dict[str, Any], needle: str) -> None:
    assert needle in event_lines(ev(body), NOW)[0].plain


def test_rejected_decision_shows_its_code_and_ids() -> None:
    body = {"requestId": "req-1", "threadId": "thread-1", "verdict": "rejected",
            "code": "uncovered_interrupts", "message": "interrupt ask-2 not covered",
            "interruptIds": ["ask-2"], "decidedAt": "2026-11-30T12:00:00Z"}
    rec = OpsRecord("p.decisions", "decisions", 0, 1, 0, "thread-1", {}, body)
    (line,) = record_lines(rec, NOW)
    assert "DECISION rejected" in line.plain
    assert "uncovered_interrupts: interrupt ask-2 not covered" in line.plain
    assert "[ask-2]" in line.plain
    assert "request=req-1" in line.plain


def test_deadletter_line_names_source_and_reason() -> None:
    body = {"sourceTopic": "p.requests", "partition": 3, "offset": 9, "value": "{",
            "reason": "not JSON", "code": "invalid_json", "service": "gatekeeper",
            "failedAt": "2026-11-30T12:00:00Z"}
    rec = OpsRecord("p.deadletter", "deadletter", 0, 0, 0, None, {}, body)
    (line,) = record_lines(rec, NOW)
    assert "invalid_json: not JSON" in line.plain
    assert "p.requests[3]@9" in line.plain
