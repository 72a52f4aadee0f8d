"""The events the bookkeeping writes itself: chunk triads and closing events — pure.

AG-UI's ``*_CHUNK`` events are a shorthand: the first chunk of an id opens
the message (or tool call, or reasoning message), each delta is content,
and the stream closes when another id or another kind of event comes. The
runtime publishes only the explicit form, so ``RunBook`` expands chunks
with ``chunk_start``/``chunk_content`` here. ``closing_event`` is the event
that closes one open item when a run ends with it still open (a subagent
closes by the run's outcome: suspended on its interrupts, succeeded, or
failed). No I/O, no state: the bookkeeping decides when; this says what.
"""

from __future__ import annotations

from ag_ui.core import (
    BaseEvent,
    EventType,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    StepFinishedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

from services.producer.endings import Kind, OpenItem, Outcome
from services.producer.errors import AgentProtocolError

CHUNK_OF: dict[EventType, Kind] = {
    EventType.TEXT_MESSAGE_CHUNK: "message",
    EventType.TOOL_CALL_CHUNK: "tool_call",
    EventType.REASONING_MESSAGE_CHUNK: "reasoning_message",
}
"""The chunk event types, and the kind of item each one streams."""


def chunk_start(kind: Kind, item_id: str, event: BaseEvent, owner: str | None) -> BaseEvent:
    """The explicit start a chunk stream of ``item_id`` opens with."""
    if kind == "message":
        return TextMessageStartEvent(message_id=item_id, role=getattr(event, "role", None),
                                     name=getattr(event, "name", None),
                                     subagent_run_id=owner)
    if kind == "tool_call":
        name = getattr(event, "tool_call_name", None)
        if not name:
            raise AgentProtocolError("the first TOOL_CALL_CHUNK of a call needs toolCallName")
        return ToolCallStartEvent(tool_call_id=item_id, tool_call_name=name,
                                  parent_message_id=getattr(event, "parent_message_id", None),
                                  subagent_run_id=owner)
    return ReasoningMessageStartEvent(message_id=item_id, subagent_run_id=owner)


def chunk_content(kind: Kind, item_id: str, delta: str, owner: str | None) -> BaseEvent:
    """The explicit content event for one chunk's ``delta``."""
    if kind == "message":
        return TextMessageContentEvent(message_id=item_id, delta=delta, subagent_run_id=owner)
    if kind == "tool_call":
        return ToolCallArgsEvent(tool_call_id=item_id, delta=delta, subagent_run_id=owner)
    return ReasoningMessageContentEvent(message_id=item_id, delta=delta, subagent_run_id=owner)


def closing_event(item: OpenItem, why: Outcome, suspended_on: list[str] | None) -> BaseEvent:
    """The event closing ``item`` when the run ends ``why`` (a subagent suspended on
    ``suspended_on`` when the run is interrupted)."""
    if item.kind == "message":
        return TextMessageEndEvent(message_id=item.id, subagent_run_id=item.owner)
    if item.kind == "tool_call":
        return ToolCallEndEvent(tool_call_id=item.id, subagent_run_id=item.owner)
    if item.kind == "step":
        return StepFinishedEvent(step_name=item.id, subagent_run_id=item.owner)
    if item.kind == "reasoning":
        return ReasoningEndEvent(message_id=item.id, subagent_run_id=item.owner)
    if item.kind == "reasoning_message":
        return ReasoningMessageEndEvent(message_id=item.id, subagent_run_id=item.owner)
    if why in ("cancelled", "error"):
        return SubagentErrorEvent(subagent_run_id=item.id, code=why, message=(
            "the run was cancelled" if why == "cancelled" else "the run failed"))
    if why == "interrupt":
        return SubagentFinishedEvent(subagent_run_id=item.id,
                                     outcome=SubagentFinishedSuspendedOutcome(
                                         interrupt_ids=suspended_on or None))
    return SubagentFinishedEvent(subagent_run_id=item.id,
                                 outcome=SubagentFinishedSuccessOutcome())
