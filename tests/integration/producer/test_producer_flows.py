"""Interrupt → resume through the topics for each sample agent; cancels; redelivery.

A real worker (in this process) consumes Dispatch records the test writes on
``dispatch.<agent>`` (as the gatekeeper would) and publishes to ``events``;
the test follows ``events`` and answers like a consumer would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from ag_ui.core import ResumeEntry
from producer_harness import Relay, first_input, in_process_worker, resume_input

from services.producer.agents.approval import LEDGER_ENV
from services.producer.context import WARNING_EVENT
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


def resolved(interrupt_id: str, payload: object = None) -> ResumeEntry:
    return ResumeEntry(interrupt_id=interrupt_id, status="resolved", payload=payload)


async def test_approval_interrupt_then_approved_resume_executes_once(
        kafka: KafkaSettings, relay: Relay, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "executions.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with in_process_worker(kafka):
        first = await relay.run("approval", first_input("t-approve", "a1", paths=["/tmp/x"]))
        first.assert_conformant()
        (interrupt,) = first.outcome["interrupts"]
        assert interrupt["reason"] == "tool_approval"
        assert first.headers[0].agent == "approval"

        # A defective consumer resuming without an entry: nothing runs, it is asked again.
        again = await relay.run("approval", resume_input(first, "a2", []))
        assert [i["id"] for i in again.outcome["interrupts"]] == [interrupt["id"]]
        assert not ledger.exists()

        second = await relay.run("approval", resume_input(
            again, "a3", [resolved(interrupt["id"], {"approved": True})]))
        second.assert_conformant()
        assert second.types[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
        assert second.outcome == {"type": "success"}
        effects = [w["value"] for w in second.wire
                   if w["type"] == "CUSTOM" and w["name"] == "agui-relay.effect"]
        assert effects == [{"key": interrupt["id"], "status": "performed"}]
        lines = [orjson.loads(x) for x in ledger.read_bytes().splitlines()]
        assert [(x["threadId"], x["interruptId"]) for x in lines] == [("t-approve",
                                                                        interrupt["id"])]


async def test_scripted_interrupts_as_given_then_resume_lists_entries(
        kafka: KafkaSettings, relay: Relay) -> None:
    given = [{"id": "i-1", "reason": "input", "expiresAt": "2031-01-01T00:00:00Z"},
             {"id": "i-2", "reason": "approval", "subagentRunId": "sub-9"}]
    async with in_process_worker(kafka):
        first = await relay.run("scripted", first_input(
            "t-script", "s1", script={"text": "Two questions", "interrupts": given}))
        first.assert_conformant()
        assert first.text() == "Two questions"
        assert first.outcome == {"type": "interrupt", "interrupts": given}

        second = await relay.run("scripted", resume_input(
            first, "s2", [ResumeEntry(interrupt_id="i-2", status="cancelled"),
                          resolved("i-1", "yes"), resolved("ghost")]))
        second.assert_conformant()
        assert second.text() == "i-2=cancelled\ni-1=resolved\nghost=resolved"
        warnings = [w["value"] for w in second.wire
                    if w["type"] == "CUSTOM" and w["name"] == WARNING_EVENT]
        assert [(w["code"], w.get("interruptIds")) for w in warnings] == [
            ("unknown_resume_entry", ["ghost"])]
        assert second.outcome == {"type": "success"}


async def test_planner_suspends_a_subagent_and_continues_it_under_the_same_id(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka):
        first = await relay.run("planner", first_input("t-plan", "p1", approvalTtlSeconds=300))
        first.assert_conformant()
        (interrupt,) = first.outcome["interrupts"]
        assert "expiresAt" in interrupt
        suspended = [w for w in first.wire if w["type"] == "SUBAGENT_FINISHED"
                     and w.get("outcome", {}).get("type") == "suspended"]
        assert [w["subagentRunId"] for w in suspended] == [interrupt["subagentRunId"]]

        second = await relay.run("planner", resume_input(
            first, "p2", [resolved(interrupt["id"], {"approved": True})]))
        second.assert_conformant()
        continued = [w["subagentRunId"] for w in second.wire if w["type"] == "SUBAGENT_STARTED"]
        assert continued == [interrupt["subagentRunId"]]
        assert second.outcome == {"type": "success"}


async def test_cancel_through_control_stops_the_run_at_its_next_await(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka):
        run = first_input("t-cancel", "c1", script={"text": "working", "delayMs": 60_000})
        await relay.dispatch("scripted", run)
        await relay.started("c1")
        await relay.cancel("t-cancel", "c1")
        view = await relay.finished("c1", within_s=15)
        view.assert_conformant()
        assert view.outcome == {"type": "cancelled"}

        # A cancel for a run that is closed, or unknown here, changes nothing.
        await relay.cancel("t-cancel", "c1")
        await relay.cancel("t-cancel", "never-dispatched")
        after = await relay.run("scripted", first_input("t-cancel", "c2"))
        assert after.outcome == {"type": "success"}
        assert relay.runs["c1"].types.count("RUN_FINISHED") == 1
        assert "never-dispatched" not in relay.runs


async def test_a_run_past_its_time_limit_ends_run_timeout_and_its_thread_goes_on(
        kafka: KafkaSettings, relay: Relay) -> None:
    """A hosted agent's run had no time limit: one that never ended (or waited for child
    runs that could never get a slot) held its thread busy for ever (found by probing)."""
    async with in_process_worker(kafka, AGUI_RUN_TIMEOUT_S="1"):
        slow = first_input("t-limit", "l1", script={"text": "working", "delayMs": 60_000})
        view = await relay.run("scripted", slow, within_s=15)
        view.assert_conformant()
        assert view.terminal["type"] == "RUN_ERROR"
        assert view.terminal["code"] == "run_timeout"
        assert "AGUI_RUN_TIMEOUT_S" in view.terminal["message"]
        after = await relay.run("scripted", first_input("t-limit", "l2", script={"text": "ok"}))
        assert after.outcome == {"type": "success"}


async def test_cancel_arriving_before_its_dispatch_cancels_the_run_when_it_starts(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka):
        await relay.cancel("t-early", "e1")
        await asyncio.sleep(1.0)  # let the worker read the cancel first
        view = await relay.run("scripted", first_input("t-early", "e1",
                                                       script={"delayMs": 60_000}))
        assert view.types == ["RUN_STARTED", "RUN_FINISHED"]
        assert view.outcome == {"type": "cancelled"}


async def test_a_redelivered_dispatch_of_a_closed_run_is_not_run_again(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka):
        run = first_input("t-dup", "d1", script={"text": "once"})
        view = await relay.run("scripted", run)
        await relay.dispatch("scripted", run)  # the same run id again
        later = await relay.run("scripted", first_input("t-dup", "d2"))
        assert later.outcome == {"type": "success"}
        assert view.types.count("RUN_STARTED") == 1
        assert len(relay.runs["d1"].records) == len(view.records)
