"""Runtime-built events assembled from their parts are exactly what the serialiser gives."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    StepFinishedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

from contracts.codec import to_wire
from services.producer.wire import plain_wire

pytestmark = pytest.mark.unit

USAGE = [TokenUsage(provider="p", model="m", input_tokens=3, output_tokens=4),
         TokenUsage(provider="q", model="n", input_tokens=1, output_tokens=0, total_tokens=1)]
INTERRUPT = Interrupt(id="i-1", reason="tool_approval", tool_call_id="c-1", message="ok?",
                      expires_at="2026-01-01T00:00:00.000Z", subagent_run_id="sub-1")

PLAIN: list[BaseEvent] = [
    RunFinishedEvent(thread_id="t", run_id="r", outcome=RunFinishedSuccessOutcome()),
    RunFinishedEvent(thread_id="t", run_id="r",
                     outcome=RunFinishedSuccessOutcome(pending_tool_call_ids=["c-1", "c-2"]),
                     usage=USAGE),
    RunFinishedEvent(thread_id="t", run_id="r", outcome=RunFinishedCancelledOutcome()),
    RunFinishedEvent(thread_id="t", run_id="r",
                     outcome=RunFinishedInterruptOutcome(interrupts=[INTERRUPT]), usage=USAGE),
    RunFinishedEvent(thread_id="t", run_id="r", outcome=RunFinishedSuccessOutcome(),
                     timestamp=1_700_000_000_000),
    RunFinishedEvent(thread_id="t", run_id="r", result="done",
                     outcome=RunFinishedSuccessOutcome()),
    RunErrorEvent(message="boom", code="agent_error"),
    RunErrorEvent(message="boom", usage=USAGE),
    TextMessageStartEvent(message_id="m", role="assistant", subagent_run_id="sub-1"),
    TextMessageContentEvent(message_id="m", delta="hello"),
    TextMessageEndEvent(message_id="m"),
    TextMessageEndEvent(message_id="m", subagent_run_id="sub-1"),
    ToolCallStartEvent(tool_call_id="c", tool_call_name="f", parent_message_id="m"),
    ToolCallArgsEvent(tool_call_id="c", delta="{}", subagent_run_id="sub-1"),
    ToolCallEndEvent(tool_call_id="c"),
    StepFinishedEvent(step_name="s", subagent_run_id="sub-1"),
    ReasoningEndEvent(message_id="m"),
    ReasoningMessageStartEvent(message_id="m"),
    ReasoningMessageContentEvent(message_id="m", delta="hmm"),
    ReasoningMessageEndEvent(message_id="m", subagent_run_id="sub-1"),
    SubagentErrorEvent(subagent_run_id="sub-1", message="the run was cancelled",
                       code="cancelled"),
    SubagentFinishedEvent(subagent_run_id="sub-1",
                          outcome=SubagentFinishedSuspendedOutcome(interrupt_ids=["i-1"])),
    SubagentFinishedEvent(subagent_run_id="sub-1", outcome=SubagentFinishedSuccessOutcome()),
]

NOT_PLAIN: list[BaseEvent] = [
    RunFinishedEvent(thread_id="t", run_id="r", result={"a": None},
                     outcome=RunFinishedSuccessOutcome()),
    RunFinishedEvent.model_validate({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                                     "outcome": {"type": "success"}, "extra": 1}),
    RunFinishedEvent(thread_id="t", run_id="r", outcome=RunFinishedInterruptOutcome(
        interrupts=[Interrupt(id="i", reason="r", response_schema={"type": "object"})])),
    CustomEvent(name="agui-relay.warning", value={"code": "c", "message": "m"}),
    SubagentFinishedEvent(subagent_run_id="sub-1", outcome=SubagentFinishedSuccessOutcome(),
                          result=[1, None]),
]


def as_bytes(wire: Any) -> bytes:
    return orjson.dumps(wire)


@pytest.mark.parametrize("event", PLAIN, ids=lambda e: e.type.value)
def test_plain_events_are_assembled_exactly_as_serialised(event: BaseEvent) -> None:
    wire = plain_wire(event)
    assert wire is not None
    assert as_bytes(wire) == as_bytes(to_wire(event))  # same keys, order and values
    assert type(event).model_validate(wire) == event


@pytest.mark.parametrize("event", NOT_PLAIN, ids=lambda e: e.type.value)
def test_anything_not_plain_is_left_to_the_serialiser(event: BaseEvent) -> None:
    assert plain_wire(event) is None
