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

Bounded by what it is fed, never more: a JSON Patch ``copy`` doubles what it
copies, so one ``STATE_DELTA`` of 1 KB (``copy /a → /a/-`` 21 times) made a
state of 2^21 copies, froze the gatekeeper's expirer and the inbox's thread
route for seconds each and took 800 MB (found by probing). A delta is
applied op by op to a copy, with the state's encoded size tracked, and one
that would grow it past ``max_state_bytes`` is refused whole (a warning; the
state stays as it was). Streamed text and tool-call arguments are gathered
as parts and joined once at the end, so a run of many deltas costs their
total length, not its square.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer
import orjson

JsonObject = dict[str, Any]
MAX_STATE_BYTES = 16 << 20
"""The largest state (encoded) a transcript builds by default: past any record a resume
could carry (``AGUI_MAX_RECORD_BYTES`` is at most 100 MiB; callers pass theirs)."""


class StateTooLargeError(ValueError):
    """A ``STATE_DELTA`` would grow the state past the bound."""


class _Parts(list[str]):
    """Text being streamed into a message or a call's arguments, joined at the end."""


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


def _append(holder: JsonObject, name: str, delta: Any) -> None:
    """Add ``delta`` to ``holder[name]``, kept as parts until ``_joined``."""
    parts = holder.get(name)
    if not isinstance(parts, _Parts):
        parts = holder[name] = _Parts([str(parts or "")])
    parts.append(str(delta or ""))


def _joined(messages: list[JsonObject]) -> None:
    for message in messages:
        if isinstance(message.get("content"), _Parts):
            message["content"] = "".join(message["content"])
        for call in message.get("toolCalls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), _Parts):
                function["arguments"] = "".join(function["arguments"])


def _size(value: Any) -> int:
    """``value``'s encoded size (what a resume record would carry of it)."""
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):  # not JSON (NaN cannot come off the wire)
        return 0


def patched(state: Any, ops: Any, max_bytes: int) -> Any:
    """``state`` with the JSON Patch ``ops`` applied, on a copy, op by op;
    ``StateTooLargeError`` as soon as the state would pass ``max_bytes`` encoded (a ``copy``
    or an ``add`` counts what it brings in, so the bound holds however ops compound)."""
    if not isinstance(ops, list):
        raise TypeError("a STATE_DELTA's delta is a list of operations")
    work = copy.deepcopy(state)
    size = _size(work)
    for op in ops:
        if isinstance(op, dict):
            kind = op.get("op")
            if kind == "copy":
                size += _size(jsonpointer.resolve_pointer(work, str(op.get("from"))))
            elif kind in ("add", "replace"):
                size += _size(op.get("value"))
        if size > max_bytes:
            raise StateTooLargeError(f"it would grow the state past {max_bytes} bytes")
        work = jsonpatch.apply_patch(work, [op], in_place=True)
    return work


class _Builder:
    def __init__(self, max_state_bytes: int = MAX_STATE_BYTES) -> None:
        self.t = Transcript()
        self.max_state_bytes = max_state_bytes

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
        _append(message, "content", event.get("delta"))

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
        _append(function, "arguments", event.get("delta"))

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
            self.t.state = patched(self.t.state, event.get("delta") or [], self.max_state_bytes)
            self.t.has_state = True
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException,
                TypeError, StateTooLargeError) as exc:
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


class Replayer:
    """``replay`` a batch at a time: a thread's history too long to hold is folded as it
    is read, and only the transcript is kept."""

    def __init__(self, *, max_state_bytes: int = MAX_STATE_BYTES) -> None:
        self._builder = _Builder(max_state_bytes)

    def feed(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            self._builder.apply(event)

    def done(self) -> Transcript:
        _joined(self._builder.t.messages)
        return self._builder.t


def replay(events: Iterable[Mapping[str, Any]], *,
           max_state_bytes: int = MAX_STATE_BYTES) -> Transcript:
    """Fold a thread's events, in partition order, into its transcript."""
    replayer = Replayer(max_state_bytes=max_state_bytes)
    replayer.feed(events)
    return replayer.done()
