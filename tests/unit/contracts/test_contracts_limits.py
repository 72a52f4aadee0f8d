"""The input limits (ids, depth) and the record-size check, at and just past every bound."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.limits import (
    EXPIRES_AT_MAX_LENGTH,
    InputLimits,
    bracket_count,
    check_id,
    check_run_input,
    check_run_request,
    interrupt_ids,
    json_depth_exceeded,
    outcome_limits,
)
from services.kafka.sizing import RecordLimit, record_size

pytestmark = pytest.mark.unit

LIMITS = InputLimits(max_id_length=256, max_json_depth=64)


def nested(depth: int) -> dict[str, Any]:
    """A document whose deepest container is at ``depth`` (the top object is 1)."""
    doc: dict[str, Any] = {}
    node = doc
    for _ in range(depth - 1):
        node["n"] = {}
        node = node["n"]
    return doc


def run_input(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"threadId": "t", "runId": "r", "state": {}, "tools": [],
                            "context": [], "forwardedProps": {},
                            "messages": [{"id": "m1", "role": "user", "content": "hi"}]}
    return {**base, **over}


@pytest.mark.parametrize(("length", "broken"), [(255, False), (256, False), (257, True)])
def test_id_length_at_and_past_the_limit(length: int, broken: bool) -> None:
    found = check_run_input(run_input(threadId="t" * length), LIMITS)
    assert (found is not None) is broken
    if found is not None:
        assert (found.code, found.field, found.actual, found.limit) == (
            "id_too_long", "threadId", 257, 256)
        assert "AGUI_MAX_ID_LENGTH" in found.detail


@pytest.mark.parametrize(("depth", "broken"), [(63, False), (64, False), (65, True),
                                               (255, True), (1025, True)])
def test_depth_at_and_past_the_limit(depth: int, broken: bool) -> None:
    doc = run_input(forwardedProps=nested(depth - 1))  # the input object is level 1
    found = check_run_input(doc, LIMITS)
    assert (found is not None) is broken
    if found is not None:
        assert found.code == "json_too_deep"
        assert found.field.startswith("forwardedProps/n")
        assert len(found.detail) < 400  # the path is quoted, bounded


@pytest.mark.parametrize(("inner", "broken"), [(93, False), (94, True)])
def test_objects_and_arrays_at_and_past_the_limit(inner: int, broken: bool) -> None:
    limits = InputLimits(max_json_containers=100)
    doc = run_input(state=[{} for _ in range(inner)])  # and 7 of the input's own
    found = check_run_input(doc, limits)
    assert (found is not None) is broken
    if found is not None:
        assert (found.code, found.limit, found.actual) == ("json_too_complex", 100, 101)
        assert found.variable == "AGUI_MAX_JSON_CONTAINERS"
    end = orjson.dumps({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                        "result": [{} for _ in range(inner)]})
    assert outcome_limits(end, limits) is None  # a run's result is the agent's: not counted
    asking = orjson.dumps({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {
        "type": "interrupt", "interrupts": [{"id": "a", "metadata": {"m": [{}] * 200}}]}})
    crowded = outcome_limits(asking, limits)  # its interrupts are held, listed, notified
    assert crowded is not None
    assert (crowded.code, crowded.field) == ("json_too_complex", "outcome/interrupts")
    deep = run_input(state=[{} for _ in range(inner)], forwardedProps=nested(70))
    too_deep = check_run_input(deep, InputLimits(max_json_containers=1_000))
    assert too_deep is not None
    assert too_deep.code == "json_too_deep"
    assert too_deep.field.startswith("forwardedProps/n")


def test_depth_walks_lists_too_and_the_hint_skips_shallow_documents() -> None:
    doc: Any = []
    for _ in range(70):
        doc = [doc]
    assert json_depth_exceeded(doc, LIMITS) is not None
    raw = orjson.dumps(run_input())
    assert bracket_count(raw) <= LIMITS.max_json_depth
    assert json_depth_exceeded(orjson.loads(raw), LIMITS, size_hint=bracket_count(raw)) is None


@given(st.recursive(st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=40))
def test_depth_agrees_with_a_recursive_count(doc: Any) -> None:
    def depth(node: Any) -> int:
        if isinstance(node, dict):
            return 1 + max((depth(v) for v in node.values()), default=0)
        if isinstance(node, list):
            return 1 + max((depth(v) for v in node), default=0)
        return 0

    for limit in (4, 5, 6):
        found = json_depth_exceeded(doc, InputLimits(max_json_depth=limit))
        assert (found is not None) is (depth(doc) > limit)
        raw = orjson.dumps(doc)
        hinted = json_depth_exceeded(doc, InputLimits(max_json_depth=limit),
                                     size_hint=bracket_count(raw))
        assert (hinted is None) is (found is None)


@pytest.mark.parametrize("path", ["messages/0/id", "messages/0/toolCallId", "messages/0/name",
                                  "messages/0/toolCalls/0/id",
                                  "messages/0/toolCalls/0/function/name",
                                  "resume/0/interruptId", "tools/0/name", "parentRunId"])
def test_every_id_and_name_is_checked(path: str) -> None:
    long = "x" * 300
    message: dict[str, Any] = {"id": "m", "role": "assistant", "content": "c",
                               "toolCalls": [{"id": "c", "type": "function",
                                              "function": {"name": "f", "arguments": "{}"}}]}
    doc = run_input(messages=[message], resume=[{"interruptId": "i", "status": "cancelled"}],
                    tools=[{"name": "t", "description": "d", "parameters": {}}])
    node: Any = doc
    parts = path.split("/")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node[parts[-1]] = long
    found = check_run_input(doc, LIMITS)
    assert found is not None
    assert found.field == path


def test_a_request_record_checks_its_own_ids_and_its_input() -> None:
    request = {"requestId": "q", "agent": "approval", "principal": "p", "input": run_input()}
    assert check_run_request(request, LIMITS) is None
    found = check_run_request({**request, "agent": "a" * 257}, LIMITS)
    assert found is not None
    assert found.field == "agent"
    found = check_run_request({**request, "input": run_input(runId="r" * 50_000)}, LIMITS)
    assert found is not None
    assert found.field == "input/runId"


@pytest.mark.parametrize(("depth", "broken"), [(64, False), (65, True)])
def test_a_request_record_measures_depth_as_its_input(depth: int, broken: bool) -> None:
    # The consumer service accepts a body of 64 levels; the gatekeeper must accept the record.
    body = run_input(forwardedProps=nested(depth - 1))
    assert (check_run_input(body, LIMITS) is not None) is broken
    request = {"requestId": "q", "agent": "approval", "input": body}
    raw = orjson.dumps(request)
    found = check_run_request(request, LIMITS, size_hint=bracket_count(raw))
    assert (found is not None) is broken


def test_non_strings_are_left_to_schema_validation() -> None:
    assert check_id("threadId", 12345, LIMITS) is None
    assert check_run_input(run_input(messages="nope", resume=[1, None]), LIMITS) is None


def test_interrupt_ids_are_listed_with_their_paths() -> None:
    outcome = {"type": "interrupt", "interrupts": [{"id": "a", "toolCallId": "c"}, {"id": "b"}]}
    assert list(interrupt_ids(outcome)) == [
        ("outcome/interrupts/0/id", "a"), ("outcome/interrupts/0/toolCallId", "c"),
        ("outcome/interrupts/1/id", "b"), ("outcome/interrupts/1/toolCallId", None)]


@pytest.mark.parametrize(("extra", "broken"), [(0, False), (1, True), (250_000, True)])
def test_an_interrupts_expires_at_is_a_dates_length(extra: int, broken: bool) -> None:
    """A run's end whose interrupt carries an ``expiresAt`` longer than a date is refused
    (read as V8 reads dates, 250,000 characters took up to 0.6 s, on every reader)."""
    date = "2026-01-01T00:00:00.000Z"
    text = date + " " * (EXPIRES_AT_MAX_LENGTH - len(date) + extra)
    end = orjson.dumps({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {
        "type": "interrupt", "interrupts": [{"id": "a"}, {"id": "b", "expiresAt": text}]}})
    found = outcome_limits(end, LIMITS)
    if not broken:
        assert found is None
        return
    assert found is not None
    assert (found.code, found.field, found.actual) == (
        "expires_at_too_long", "outcome/interrupts/1/expiresAt", len(text))
    assert f"at most {EXPIRES_AT_MAX_LENGTH} characters" in found.detail
    assert found.variable is None


def test_record_size_counts_key_value_and_headers() -> None:
    bare = record_size(None, b"v" * 1000)
    assert record_size(b"k" * 1000, b"v" * 1000) >= bare + 1000
    assert record_size(None, b"v" * 1000, [("h", b"x" * 1000)]) >= bare + 1000


def test_record_limit_at_and_past_the_limit() -> None:
    limit = RecordLimit(1_048_576)
    value = b"v" * (1_048_576 - record_size(b"k", b""))
    fitting = value[: len(value) - 16]
    assert limit.fits(b"k", fitting)
    assert limit.excess(b"k", value + b"v" * 16) is not None
    # A huge key alone breaks it, as the broker counts it: the value check missed this.
    size = limit.excess(b"t" * 400_000 * 3, b"{}")
    assert size is not None
    assert "AGUI_MAX_RECORD_BYTES" in limit.why("the decision", size)


def test_a_request_record_counts_the_objects_and_arrays_of_its_input_alone() -> None:
    """A body the consumer service took at the limit passes the gatekeeper's check of its
    record too (the envelope around it is not counted)."""
    limits = InputLimits(max_json_containers=100)
    doc = run_input(state=[{} for _ in range(93)])  # 100 with the input's own 7
    assert check_run_input(doc, limits) is None
    record = {"requestId": "q", "agent": "a", "input": doc}
    assert check_run_request(record, limits) is None
    over = {**record, "input": run_input(state=[{} for _ in range(94)])}
    broken = check_run_request(over, limits)
    assert broken is not None
    assert broken.code == "json_too_complex"
