"""Rebuilding a thread's messages and state from its events."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest
from ag_ui.core import RunAgentInput
from hypothesis import given
from hypothesis import strategies as st

from services.agui.transcript import replay

pytestmark = pytest.mark.unit

USER = {"id": "u1", "role": "user", "content": "clean up"}


def started(run: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": "t", "runId": run,
            "input": {"threadId": "t", "runId": run, "messages": messages, **extra}}


def test_input_echo_then_streamed_text_and_tool_call() -> None:
    events = [
        started("r1", [USER], state={"files": 3}, tools=[], forwardedProps={"x": 1}),
        {"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "I will "},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "delete them."},
        {"type": "TEXT_MESSAGE_END", "messageId": "a1"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "delete_files",
         "parentMessageId": "a1"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"paths":'},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '["a"]}'},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"},
    ]
    t = replay(events)
    assert t.messages == [
        USER,
        {"id": "a1", "role": "assistant", "content": "I will delete them.",
         "toolCalls": [{"id": "c1", "type": "function",
                        "function": {"name": "delete_files", "arguments": '{"paths":["a"]}'}}]},
    ]
    assert t.state == {"files": 3}
    assert t.has_state
    assert t.forwarded_props == {"x": 1}
    assert t.tools == []
    assert t.last_run_id == "r1"
    built = RunAgentInput.model_validate({"threadId": "t", "runId": "r2", **t.input_fields()})
    assert len(built.messages) == 2


def test_tool_call_without_parent_gets_its_own_assistant_message_and_result() -> None:
    t = replay([
        started("r1", [USER]),
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "search"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "TOOL_CALL_RESULT", "messageId": "m9", "toolCallId": "c1", "content": "found"},
    ])
    assert t.messages[1] == {"id": "c1", "role": "assistant", "toolCalls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]}
    assert t.messages[2] == {"id": "m9", "role": "tool", "toolCallId": "c1", "content": "found"}
    RunAgentInput.model_validate({"threadId": "t", "runId": "r2", **t.input_fields()})


def test_next_run_start_resets_to_its_input() -> None:
    t = replay([
        started("r1", [USER]),
        {"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "streamed"},
        started("r2", [USER, {"id": "u2", "role": "user", "content": "again"}]),
    ])
    assert [m["id"] for m in t.messages] == ["u1", "u2"]
    assert t.last_run_id == "r2"


def test_run_started_without_input_keeps_history() -> None:
    t = replay([started("r1", [USER]),
                {"type": "RUN_STARTED", "threadId": "t", "runId": "r2"}])
    assert t.messages == [USER]
    assert t.last_run_id == "r2"


def test_snapshots_replace_and_activity_is_dropped() -> None:
    snapshot = [USER, {"id": "act", "role": "activity", "activityType": "x", "content": {}},
                {"id": "a1", "role": "assistant", "content": "hi"}]
    t = replay([started("r1", [USER], state={"a": 1}),
                {"type": "MESSAGES_SNAPSHOT", "messages": snapshot},
                {"type": "STATE_SNAPSHOT", "snapshot": {"b": [1]}},
                {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b/-", "value": 2},
                                                  {"op": "add", "path": "/c", "value": "x"}]}])
    assert [m["id"] for m in t.messages] == ["u1", "a1"]
    assert t.state == {"b": [1, 2], "c": "x"}


def test_unappliable_delta_keeps_state_and_warns() -> None:
    t = replay([started("r1", [], state={"a": 1}),
                {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/missing"}]}])
    assert t.state == {"a": 1}
    assert t.warnings
    assert "STATE_DELTA" in t.warnings[0]


def test_state_absent_when_never_seen() -> None:
    t = replay([started("r1", [USER])])
    assert "state" not in t.input_fields()
    assert not t.has_state


def test_reasoning_and_subagent_attribution() -> None:
    t = replay([
        started("r1", []),
        {"type": "REASONING_MESSAGE_START", "messageId": "z1", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "z1", "delta": "hmm"},
        {"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant",
         "subagentRunId": "sub-1"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "from child"},
    ])
    assert t.messages == [{"id": "z1", "role": "reasoning", "content": "hmm"},
                          {"id": "a1", "role": "assistant", "content": "from child",
                           "subagentRunId": "sub-1"}]


def test_input_fields_are_copies() -> None:
    t = replay([started("r1", [USER], state={"a": [1]})])
    fields = t.input_fields()
    fields["state"]["a"].append(2)
    fields["messages"].clear()
    assert t.state == {"a": [1]}
    assert t.messages == [USER]


@given(st.lists(st.text(max_size=5), max_size=12))
def test_streamed_text_is_the_concatenation_of_deltas(deltas: list[str]) -> None:
    events = [started("r1", []), {"type": "TEXT_MESSAGE_START", "messageId": "a"}]
    events += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "a", "delta": d} for d in deltas]
    assert replay(events).messages == [{"id": "a", "role": "assistant", "content": "".join(deltas)}]


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                           max_leaves=8)


@given(json_values, json_values)
def test_delta_from_json_patch_diff_lands_on_the_target(source: Any, target: Any) -> None:
    patch = jsonpatch.make_patch(source, target).patch
    t = replay([started("r1", [], state=source), {"type": "STATE_DELTA", "delta": patch}])
    assert t.state == target
    assert not t.warnings


def doubling(ops: int) -> dict[str, Any]:
    """A 1 KB delta whose ops each double ``/a``: 2^ops copies of it if applied."""
    return {"type": "STATE_DELTA", "delta": [{"op": "copy", "from": "/a", "path": "/a/-"}] * ops}


def test_a_delta_that_would_grow_the_state_past_the_bound_is_refused_whole() -> None:
    """21 doubling ops made 2^21 copies: seconds of CPU and 800 MB in the gatekeeper's
    expirer and the inbox's thread route (found by probing). The bound stops it at the op
    that would pass it, and nothing of the delta is kept."""
    t = replay([started("r1", [], state={"a": list(range(8))}), doubling(40)],
               max_state_bytes=1 << 20)
    assert t.state == {"a": list(range(8))}
    assert "past 1048576 bytes" in t.warnings[0]


def test_a_delta_within_the_bound_applies_and_the_bound_counts_what_ops_bring_in() -> None:
    t = replay([started("r1", [], state={"a": [1]}), doubling(3)], max_state_bytes=1024)
    assert t.state == jsonpatch.apply_patch({"a": [1]}, doubling(3)["delta"])
    assert len(str(t.state)) > 30
    big = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": "x" * 2000}]}
    assert replay([started("r1", [], state={}), big], max_state_bytes=1024).state == {}
    assert replay([started("r1", [], state={}), big], max_state_bytes=4096).state == {
        "b": "x" * 2000}


def test_a_failing_op_after_applied_ones_keeps_the_state_as_it_was() -> None:
    delta = {"type": "STATE_DELTA", "delta": [
        {"op": "add", "path": "/b", "value": 1}, {"op": "test", "path": "/a", "value": 2}]}
    t = replay([started("r1", [], state={"a": 1}), delta])
    assert t.state == {"a": 1}
    assert t.warnings


def test_a_long_run_of_deltas_is_gathered_whole() -> None:
    """Deltas are kept as parts and joined once (each was concatenated onto the whole text
    so far: a run of 200,000 tokens copied 10^11 bytes); the joined text is exact."""
    n = 200_000
    events = [started("r1", []), {"type": "TEXT_MESSAGE_START", "messageId": "a"},
              {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f",
               "parentMessageId": "a"}]
    events += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "a", "delta": "tok "}] * n
    events += [{"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "x"}] * n
    t = replay(events)
    assert t.messages[0]["content"] == "tok " * n
    assert t.messages[0]["toolCalls"][0]["function"]["arguments"] == "x" * n
