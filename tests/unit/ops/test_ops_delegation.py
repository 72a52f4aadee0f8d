"""Delegation's pure parts: child threads, interrupts carried up, answers routed down."""

from __future__ import annotations

import pytest
from ag_ui.core import Interrupt, ResumeEntry
from hypothesis import given
from hypothesis import strategies as st

from services.producer.delegation import (
    CHILD_METADATA,
    ChildOutcome,
    carry_up,
    outcome_of,
    route_down,
)

pytestmark = pytest.mark.unit


def child(*interrupts: Interrupt) -> ChildOutcome:
    return ChildOutcome("pipeline_child", "t1/review", "c-run", "interrupt", list(interrupts))


def test_carry_up_namespaces_ids_and_names_the_child() -> None:
    original = Interrupt(id="sign-off", reason="sign_off", message="Sign?", tool_call_id="call-1",
                         response_schema={"type": "object"}, expires_at="2020-01-01T00:00:00Z",
                         metadata={"team": "x"}, subagent_run_id="sub-9")
    (up,) = carry_up("review", child(original))
    assert up.id == "review/sign-off"
    assert (up.reason, up.message, up.response_schema, up.expires_at) == (
        "sign_off", "Sign?", {"type": "object"}, "2020-01-01T00:00:00Z")
    assert up.tool_call_id is None
    assert up.subagent_run_id is None
    assert up.metadata == {"team": "x", CHILD_METADATA: {
        "agent": "pipeline_child", "threadId": "t1/review", "runId": "c-run",
        "interruptId": "sign-off", "toolCallId": "call-1"}}


def test_route_down_takes_only_this_keys_answers() -> None:
    answers = {
        "review/sign-off": ResumeEntry(interrupt_id="review/sign-off", status="resolved",
                                       payload={"approved": True}),
        "review/other": ResumeEntry(interrupt_id="review/other", status="cancelled"),
        "legal/sign-off": ResumeEntry(interrupt_id="legal/sign-off", status="cancelled"),
        "own": ResumeEntry(interrupt_id="own", status="resolved", payload=1),
    }
    routed = route_down("review", answers)
    assert [(e.interrupt_id, e.status, e.payload) for e in routed] == [
        ("sign-off", "resolved", {"approved": True}), ("other", "cancelled", None)]


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5, unique=True),
       st.sampled_from(["resolved", "cancelled"]))
def test_carried_up_ids_route_back_to_the_child_ids(ids: list[str], status: str) -> None:
    up = carry_up("k", child(*(Interrupt(id=i, reason="r") for i in ids)))
    assert len({i.id for i in up}) == len(ids)
    answers = {i.id: ResumeEntry(interrupt_id=i.id, status=status) for i in up}  # type: ignore[arg-type]
    assert [e.interrupt_id for e in route_down("k", answers)] == ids


def test_outcome_of_reads_terminal_events() -> None:
    text = [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "ok "},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "done"}]
    success = outcome_of("a", "t", "r", [*text, {"type": "RUN_FINISHED", "threadId": "t",
                                                 "runId": "r", "result": {"x": 1}}])
    assert (success.status, success.text, success.result) == ("success", "ok done", {"x": 1})
    asked = outcome_of("a", "t", "r", [{"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                                        "outcome": {"type": "interrupt", "interrupts": [
                                            {"id": "i", "reason": "r"}]}}])
    assert asked.status == "interrupt"
    assert [i.id for i in asked.interrupts] == ["i"]
    failed = outcome_of("a", "t", "r", [{"type": "RUN_ERROR", "message": "boom", "code": "x"}])
    assert (failed.status, failed.error) == ("error", "x: boom")
    stopped = outcome_of("a", "t", "r", [{"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                                          "outcome": {"type": "cancelled"}}])
    assert stopped.status == "cancelled"
