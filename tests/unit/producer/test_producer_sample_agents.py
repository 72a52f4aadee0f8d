"""The sample agents, run in memory through the runner: first runs and resumes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt
from producer_support import (
    ListSink,
    assert_conformant,
    cancelled,
    make_input,
    outcome_of,
    resolved,
    resume_input,
    run_agent,
    runner_for,
)

from services.producer.agents import approval, planner, scripted
from services.producer.effects import MemoryLedger

pytestmark = pytest.mark.unit


def script(**script: Any) -> Any:
    return make_input(forwarded_props={"script": script})


def text_of(sink: ListSink) -> str:
    return "".join(w["delta"] for w in sink.wire if w["type"] == "TEXT_MESSAGE_CONTENT")


def interrupts_of(sink: ListSink) -> list[Interrupt]:
    assert sink.report is not None
    return list(sink.report.open_interrupts)


# ---- scripted -----------------------------------------------------------------


async def test_scripted_text_then_exactly_the_given_interrupts() -> None:
    given = [{"id": "x1", "reason": "approval", "expiresAt": "2030-01-01T00:00:00Z",
              "subagentRunId": "sub-7"}, {"id": "x2", "reason": "input"}]
    sink = await run_agent(scripted.agent, script(text="Need input", interrupts=given))
    assert text_of(sink) == "Need input"
    assert outcome_of(sink) == {"type": "interrupt", "interrupts": given}
    assert_conformant(sink)


async def test_scripted_failure_and_plain_success() -> None:
    failed = await run_agent(scripted.agent, script(fail="it broke"))
    assert failed.wire[-1] == {**failed.wire[-1], "type": "RUN_ERROR",
                               "code": "scripted_failure", "message": "it broke"}
    plain = await run_agent(scripted.agent, make_input())
    assert plain.types == ["RUN_STARTED", "RUN_FINISHED"]


async def test_scripted_resume_lists_each_entry_in_input_order() -> None:
    first = await run_agent(scripted.agent, script(interrupts=[{"id": "b", "reason": "r"},
                                                               {"id": "a", "reason": "r"}]))
    second = await run_agent(
        scripted.agent, resume_input(first, "run-2", [cancelled("a"), resolved("b", 1)]),
        open_interrupts=interrupts_of(first))
    assert text_of(second) == "a=cancelled\nb=resolved"
    assert outcome_of(second) == {"type": "success"}
    assert_conformant(second)


async def test_scripted_tool_calls_run_with_the_arguments_an_approval_edited() -> None:
    calls = [{"id": "c1", "name": "delete_files", "arguments": {"paths": ["/a", "/b"]}},
             {"id": "c2", "name": "send_mail", "arguments": {"to": "x"}},
             {"id": "c3", "name": "noop", "arguments": {}}]
    first = await run_agent(scripted.agent, script(toolCalls=calls, interrupts=[
        {"id": "edit", "reason": "tool_approval", "toolCallId": "c1"},
        {"id": "plain", "reason": "tool_approval", "toolCallId": "c2"},
        {"id": "no", "reason": "tool_approval", "toolCallId": "c3"}]))
    assert [w["toolCallName"] for w in first.wire if w["type"] == "TOOL_CALL_START"] == [
        "delete_files", "send_mail", "noop"]
    assert_conformant(first)
    second = await run_agent(scripted.agent, resume_input(first, "run-2", [
        resolved("edit", {"approved": True, "arguments": {"paths": ["/a"]}}),
        resolved("plain", {"approved": True}), resolved("no", {"approved": False})]),
        open_interrupts=interrupts_of(first))
    assert text_of(second) == ('edit=resolved\nplain=resolved\nno=resolved'
                               'ran delete_files with {"paths":["/a"]}\n'
                               'ran send_mail with {"to":"x"}')
    assert_conformant(second)


async def test_scripted_delay_is_cancellable() -> None:
    runner, sink = runner_for(scripted.agent, script(delayMs=60_000, text="waiting"))
    task = asyncio.create_task(runner.run())
    while "TEXT_MESSAGE_END" not in sink.types:
        await asyncio.sleep(0.01)
    runner.cancel()
    report = await asyncio.wait_for(task, 5)
    assert report.outcome == "cancelled"


async def test_scripted_invalid_script_fails_the_run() -> None:
    sink = await run_agent(scripted.agent, script(delayMs="soon"))
    assert sink.wire[-1]["code"] == "invalid_script"


# ---- approval -----------------------------------------------------------------


@pytest.fixture
def ledger_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "executions.jsonl"
    monkeypatch.setenv(approval.LEDGER_ENV, str(path))
    return path


def executions(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


async def test_approval_first_run_asks_once_for_its_tool_call() -> None:
    sink = await run_agent(approval.agent, make_input(forwarded_props={"paths": ["/x"]}))
    (interrupt,) = outcome_of(sink)["interrupts"]
    start = next(w for w in sink.wire if w["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "delete_files"
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["toolCallId"] == start["toolCallId"]
    assert interrupt["responseSchema"]["properties"]["approved"] == {"type": "boolean"}
    assert_conformant(sink)


async def test_approval_resume_approved_executes_once_and_restates_history(
        ledger_file: Path) -> None:
    ledger = MemoryLedger()
    first = await run_agent(approval.agent, make_input(forwarded_props={"paths": ["/x"]}))
    (interrupt,) = interrupts_of(first)
    second = await run_agent(
        approval.agent, resume_input(first, "run-2", [resolved(interrupt.id, {"approved": True})]),
        open_interrupts=[interrupt], ledger=ledger)
    assert second.types[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    result = next(w for w in second.wire if w["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt.tool_call_id
    assert orjson.loads(result["content"]) == {"deleted": ["/x"]}
    assert outcome_of(second) == {"type": "success"}
    assert [e["interruptId"] for e in executions(ledger_file)] == [interrupt.id]
    assert_conformant(second)

    again = await run_agent(
        approval.agent, resume_input(first, "run-3", [resolved(interrupt.id, {"approved": True})]),
        open_interrupts=[interrupt], ledger=ledger)
    assert outcome_of(again) == {"type": "success"}
    assert len(executions(ledger_file)) == 1


@pytest.mark.parametrize("entry", [
    resolved("ID", {"approved": False}), cancelled("ID"), resolved("ID", {"approved": "yes"})])
async def test_approval_refused_or_cancelled_executes_nothing(ledger_file: Path,
                                                              entry: Any) -> None:
    first = await run_agent(approval.agent, make_input())
    (interrupt,) = interrupts_of(first)
    entry = entry.model_copy(update={"interrupt_id": interrupt.id})
    second = await run_agent(approval.agent, resume_input(first, "run-2", [entry]),
                             open_interrupts=[interrupt], ledger=MemoryLedger())
    result = next(w for w in second.wire if w["type"] == "TOOL_CALL_RESULT")
    assert orjson.loads(result["content"])["refused"] is True
    assert outcome_of(second) == {"type": "success"}
    assert executions(ledger_file) == []
    assert_conformant(second)


async def test_approval_uncovered_is_carried_again_never_executed(ledger_file: Path) -> None:
    first = await run_agent(approval.agent, make_input())
    (interrupt,) = interrupts_of(first)
    carried = await run_agent(approval.agent, resume_input(first, "run-2", []),
                              open_interrupts=[interrupt], ledger=MemoryLedger())
    assert [i["id"] for i in outcome_of(carried)["interrupts"]] == [interrupt.id]
    refused = await run_agent(approval.agent, resume_input(first, "run-3", []),
                              open_interrupts=[interrupt], policy="reject")
    assert refused.types == ["RUN_ERROR"]
    assert executions(ledger_file) == []


async def test_approval_gated_call_detected_from_history_alone(ledger_file: Path) -> None:
    first = await run_agent(approval.agent, make_input())
    (interrupt,) = interrupts_of(first)
    # No checkpoint remembers the interrupt, and the resume names another id.
    second = await run_agent(approval.agent,
                             resume_input(first, "run-2", [resolved("other", {"approved": True})]))
    assert [i["id"] for i in outcome_of(second)["interrupts"]] == [interrupt.id]
    assert executions(ledger_file) == []


# ---- planner ------------------------------------------------------------------


async def test_planner_interrupts_from_a_suspended_subagent_then_continues_it() -> None:
    first = await run_agent(planner.agent, make_input(forwarded_props={"approvalTtlSeconds": 60}))
    (interrupt,) = outcome_of(first)["interrupts"]
    started = {w["name"]: w["subagentRunId"] for w in first.wire
               if w["type"] == "SUBAGENT_STARTED"}
    finished = {w["subagentRunId"]: w for w in first.wire if w["type"] == "SUBAGENT_FINISHED"}
    assert set(started) == {"researcher", "executor"}
    assert finished[started["researcher"]]["outcome"] == {"type": "success"}
    assert finished[started["researcher"]]["result"] == {"stale": 3}
    assert finished[started["executor"]]["outcome"] == {"type": "suspended",
                                                         "interruptIds": [interrupt["id"]]}
    assert interrupt["subagentRunId"] == started["executor"]
    expires = datetime.fromisoformat(interrupt["expiresAt"])
    assert 0 < (expires - datetime.now(UTC)).total_seconds() <= 61
    assert interrupt["expiresAt"].endswith("Z")
    assert_conformant(first)

    second = await run_agent(
        planner.agent, resume_input(first, "run-2", [resolved(interrupt["id"],
                                                              {"approved": True})]),
        open_interrupts=interrupts_of(first))
    restarted = [w for w in second.wire if w["type"] == "SUBAGENT_STARTED"]
    assert [w["subagentRunId"] for w in restarted] == [started["executor"]]
    done = next(w for w in second.wire if w["type"] == "SUBAGENT_FINISHED")
    assert done["outcome"] == {"type": "success"}
    assert outcome_of(second) == {"type": "success"}
    assert second.wire[-1]["result"] == {"executed": True}
    assert_conformant(second)


async def test_planner_cancelled_approval_drops_the_plan() -> None:
    first = await run_agent(planner.agent, make_input())
    (interrupt,) = interrupts_of(first)
    second = await run_agent(planner.agent, resume_input(first, "run-2",
                                                         [cancelled(interrupt.id)]),
                             open_interrupts=[interrupt])
    assert "cancelled" in text_of(second)
    assert second.wire[-1]["result"] == {"executed": False}
