"""``agui-relay audit``'s rendering: the table keeps every id and digest whole; --json."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from services.agui.audit import digest
from services.cli.ops.audit import audit_json, print_audit, when
from services.kafka.records import OpsRecord
from services.kafka.thread_log import ThreadRecords

pytestmark = pytest.mark.unit

THREAD = "parent/child-" + "x" * 60
RAISED_RUN = "run-" + "r" * 50


def event(offset: int, value: dict[str, Any]) -> OpsRecord:
    return OpsRecord("t.events", "events", 0, offset, 1_764_640_800_000 + offset, THREAD,
                     {"agui-agent": "approval"}, value)


def found() -> ThreadRecords:
    raised = event(1, {"type": "RUN_FINISHED", "runId": RAISED_RUN, "outcome": {
        "type": "interrupt", "interrupts": [
            {"id": "interrupt-" + "a" * 40, "reason": "approval", "message": "Send it?"},
            {"id": "i-open", "reason": "input", "expiresAt": "2026-12-03T00:00:00Z"}]}})
    resumed = event(2, {"type": "RUN_STARTED", "runId": "run-2", "input": {"resume": [
        {"interruptId": "interrupt-" + "a" * 40, "status": "resolved",
         "payload": {"approved": True},
         "metadata": {"agui-relay.principal": "tenant-a"}}]}})
    return ThreadRecords(THREAD, None, [raised, resumed], [])


def render(console: Console) -> str:
    print_audit(console, found())
    return console.export_text()


@pytest.mark.parametrize("terminal", [True, False])
def test_ids_and_digests_are_printed_whole_in_a_narrow_console(terminal: bool) -> None:
    text = render(Console(record=True, width=60, force_terminal=terminal))
    for whole in ("interrupt-" + "a" * 40, RAISED_RUN, digest({"approved": True}), "tenant-a"):
        assert whole in text


def test_a_wide_terminal_gets_the_boxed_table_with_each_interrupts_status() -> None:
    text = render(Console(record=True, width=400, force_terminal=True))
    assert "┃" in text
    assert "resolved" in text
    assert "open" in text
    assert when(1_764_640_800_002) in text


def test_a_thread_without_interrupts_says_so() -> None:
    console = Console(record=True, width=100)
    print_audit(console, ThreadRecords("quiet[bold]", None, [event(1, {"type": "RUN_STARTED",
                                                                        "runId": "r"})], []))
    assert console.export_text().strip() == "thread quiet[bold] raised no interrupt"


def test_json_is_the_http_routes_document() -> None:
    body = audit_json(found())
    assert body["threadId"] == THREAD
    first, second = body["interrupts"]
    assert first["status"] == "resolved"
    assert first["answer"] == {"status": "resolved", "runId": "run-2", "by": "tenant-a",
                               "at": 1_764_640_800_002, "digest": digest({"approved": True})}
    assert second == {"interruptId": "i-open", "status": "open", "runId": RAISED_RUN,
                      "agent": "approval", "raisedAt": 1_764_640_800_001, "reason": "input",
                      "expiresAt": "2026-12-03T00:00:00Z"}


def test_when_is_utc_to_the_millisecond() -> None:
    assert when(1_764_640_800_123) == "2025-12-02 02:00:00.123"
