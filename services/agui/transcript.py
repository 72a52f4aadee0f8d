"""A thread's accumulated messages and state, rebuilt from its events.

AG-UI resumes carry "the accumulated messages and the state the interrupted
run left" (digest §1b rule 17), which a front end keeps in memory and an
operator's terminal does not: this module rebuilds them from the thread's
events on Kafka, applying them the way the reference client's default
reducer does. Each ``RUN_STARTED`` that echoes its ``input`` resets the
history to that input (it is what the consumer sent, i.e. everything up to
then); ``MESSAGES_SNAPSHOT`` and ``STATE_SNAPSHOT`` replace; ``STATE_DELTA``
applies an RFC 6902 JSON Patch; streamed text, reasoning and tool-call
events build messages; ``TOOL_CALL_RESULT`` adds a tool message. Activity
messages are left out, as the reference client leaves them out of inputs.
Works on wire JSON (camelCase dicts) so nothing a producer added is lost.
Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

JsonObject = dict[str, Any]


@dataclass
class Transcript:
    """What a thread's next input should carry, as last seen on the topics."""

    messages: list[JsonObject] = field(default_factory=list)
    state: Any = None
    has_state: bool = False
    tools: list[Any] | None = None
    context: list[Any] | None = None
    forwarded_props: Any = None
    last_run_id: str | None = None
    warnings: list[str] = field(default_factory=list)

    def input_fields(self) -> JsonObject:
        """The ``RunAgentInput`` members it supplies (wire names; state only if seen)."""
        out: JsonObject = {"messages": copy.deepcopy(self.messages)}
        if self.has_state:
            out["state"] = copy.deepcopy(self.state)
        if self.tools is not None:
            out["tools"] = copy.deepcopy(self.tools)
        if self.context is not None:
            out["context"] = copy.deepcopy(self.context)
        if self.forwarded_props is not None:
            out["forwardedProps"] = copy.deepcopy(self.forwarded_props)
        return out


def _without_activity(messages: Any) -> list[JsonObject]:
    if not isinstance(messages, list):
        return []
    return [copy.deepcopy(m) for m in messages
            if isinstance(m, dict) and m.get("role") != "activity"]


class _Builder:
    def __init__(self) -> None:
        self.t = Transcript()

    def _find(self, message_id: Any) -> JsonObject | None:
        for message in reversed(self.t.messages):
            if message.get("id") == message_id:
                return message
        return None

    def _new_message(self, event: Mapping[str, Any], role: str, **extra: Any) -> JsonObject:
        message: JsonObject = {"id": event.get("messageId"), "role": role, **extra}
        if event.get("subagentRunId"):
            message["subagentRunId"] = event["subagentRunId"]
        self.t.messages.append(message)
        return message

    def _append_text(self, event: Mapping[str, Any], role: str) -> None:
        message = self._find(event.get("messageId"))
        if message is None:
            message = self._new_message(event, role, content="")
        message["content"] = str(message.get("content") or "") + str(event.get("delta") or "")

    def _tool_call(self, event: Mapping[str, Any]) -> None:
        call_id = event.get("toolCallId")
        parent_id = event.get("parentMessageId")
        parent = self._find(parent_id) if parent_id is not None else None
        if parent is None or parent.get("role") != "assistant":
            parent = {"id": parent_id or call_id, "role": "assistant"}
            if event.get("subagentRunId"):
                parent["subagentRunId"] = event["subagentRunId"]
            self.t.messages.append(parent)
        calls = parent.setdefault("toolCalls", [])
        calls.append({"id": call_id, "type": "function",
                      "function": {"name": event.get("toolCallName"), "arguments": ""}})

    def _find_call(self, call_id: Any) -> JsonObject | None:
        for message in reversed(self.t.messages):
            for call in message.get("toolCalls") or []:
                if isinstance(call, dict) and call.get("id") == call_id:
                    return call
        return None

    def _tool_args(self, event: Mapping[str, Any]) -> None:
        call = self._find_call(event.get("toolCallId"))
        if call is None:
            if event.get("toolCallName") is None:
                self.t.warnings.append(f"arguments for unknown tool call {event.get('toolCallId')}")
                return
            self._tool_call(event)
            call = self._find_call(event.get("toolCallId"))
            assert call is not None
        function = call.setdefault("function", {"name": "", "arguments": ""})
        function["arguments"] = str(function.get("arguments") or "") + str(event.get("delta") or "")

    def _start(self, event: Mapping[str, Any]) -> None:
        self.t.last_run_id = event.get("runId")
        given = event.get("input")
        if not isinstance(given, dict):
            return
        self.t.messages = _without_activity(given.get("messages"))
        if "state" in given:
            self.t.state, self.t.has_state = copy.deepcopy(given["state"]), True
        for name, attr in (("tools", "tools"), ("context", "context"),
                           ("forwardedProps", "forwarded_props")):
            if name in given:
                setattr(self.t, attr, copy.deepcopy(given[name]))

    def _delta(self, event: Mapping[str, Any]) -> None:
        try:
            self.t.state = jsonpatch.apply_patch(self.t.state, event.get("delta") or [])
            self.t.has_state = True
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException,
                TypeError) as exc:
            self.t.warnings.append(f"STATE_DELTA not applicable, state kept: {exc}")

    def apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "RUN_STARTED":
            self._start(event)
        elif kind == "MESSAGES_SNAPSHOT":
            self.t.messages = _without_activity(event.get("messages"))
        elif kind == "STATE_SNAPSHOT":
            self.t.state, self.t.has_state = copy.deepcopy(event.get("snapshot")), True
        elif kind == "STATE_DELTA":
            self._delta(event)
        elif kind == "TEXT_MESSAGE_START":
            if self._find(event.get("messageId")) is None:
                self._new_message(event, str(event.get("role") or "assistant"), content="")
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK"):
            self._append_text(event, str(event.get("role") or "assistant"))
        elif kind == "REASONING_MESSAGE_START":
            if self._find(event.get("messageId")) is None:
                self._new_message(event, "reasoning", content="")
        elif kind in ("REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_CHUNK"):
            self._append_text(event, "reasoning")
        elif kind == "TOOL_CALL_START":
            if self._find_call(event.get("toolCallId")) is None:
                self._tool_call(event)
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_CHUNK"):
            self._tool_args(event)
        elif kind == "TOOL_CALL_RESULT":
            self._new_message(event, "tool", toolCallId=event.get("toolCallId"),
                              content=copy.deepcopy(event.get("content")))


def replay(events: Iterable[Mapping[str, Any]]) -> Transcript:
    """Fold a thread's events, in partition order, into its transcript."""
    builder = _Builder()
    for event in events:
        builder.apply(event)
    return builder.t
