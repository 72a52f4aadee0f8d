"""Id length and JSON depth of a RunAgentInput at the edge: 400 naming the field and the limit.

``parse_input`` is the service's whole check of a body (the route calls it
between reading and publishing); each case is one field at its limit, which
passes, and one character or level past it, which is the 400 with ``field``
and ``limit`` in the problem document — and a body orjson parses but could
never serialise again (253-1,024 levels, the old 500) or cannot parse at all
(past 1,024) is a 400 too.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from contracts import RunRequest, encode
from contracts.limits import InputLimits
from services.consumer.limits import check_ids
from services.consumer.problems import InvalidInput
from services.consumer.runs import parse_input
from services.consumer.settings import ConsumerSettings

pytestmark = pytest.mark.unit

LIMITS = InputLimits(max_id_length=32, max_json_depth=16)
SETTINGS = ConsumerSettings()


def body(**members: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"threadId": "t1", "runId": "r1", "messages": [
        {"id": "m0", "role": "user", "content": "hi"}]}
    doc.update(members)
    return doc


def nested(levels: int) -> dict[str, Any]:
    """forwardedProps nested so the whole body has ``levels`` levels (the body is level 1)."""
    value: Any = {}
    for _ in range(levels - 2):
        value = {"a": value}
    return body(forwardedProps=value)


def refused(doc: dict[str, Any] | bytes) -> dict[str, object]:
    raw = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    with pytest.raises(InvalidInput) as err:
        parse_input(raw, SETTINGS, LIMITS)
    assert err.value.status == 400
    return err.value.body()


def long(n: int) -> str:
    return "x" * n


def tool_call(call_id: str = "c1", name: str = "f") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


CASES: dict[str, Any] = {
    "threadId": lambda v: body(threadId=v),
    "runId": lambda v: body(runId=v),
    "parentRunId": lambda v: body(parentRunId=v),
    "messages/1/id": lambda v: body(messages=[
        {"id": "m0", "role": "user", "content": "hi"}, {"id": v, "role": "user", "content": "x"}]),
    "messages/0/name": lambda v: body(messages=[
        {"id": "m0", "role": "user", "content": "hi", "name": v}]),
    "messages/0/toolCallId": lambda v: body(messages=[
        {"id": "m0", "role": "tool", "content": "ok", "toolCallId": v}]),
    "messages/0/toolCalls/0/id": lambda v: body(messages=[
        {"id": "m0", "role": "assistant", "toolCalls": [tool_call(call_id=v)]}]),
    "messages/0/toolCalls/0/function/name": lambda v: body(messages=[
        {"id": "m0", "role": "assistant", "toolCalls": [tool_call(name=v)]}]),
    "resume/0/interruptId": lambda v: body(resume=[{"interruptId": v, "status": "cancelled"}]),
    "tools/0/name": lambda v: body(tools=[{"name": v, "description": "d", "parameters": {}}]),
}


@pytest.mark.parametrize("field", sorted(CASES))
def test_every_id_and_name_is_bounded(field: str) -> None:
    at_limit = parse_input(orjson.dumps(CASES[field](long(32))), SETTINGS, LIMITS)
    assert at_limit.thread_id
    problem = refused(CASES[field](long(33)))
    assert problem["code"] == "id_too_long"
    assert (problem["field"], problem["limit"]) == (field, 32)
    assert "AGUI_MAX_ID_LENGTH" in str(problem["detail"])


def test_depth_at_the_limit_passes_and_one_level_more_is_refused() -> None:
    assert parse_input(orjson.dumps(nested(16)), SETTINGS, LIMITS).forwarded_props
    problem = refused(nested(17))
    assert problem["code"] == "json_too_deep"
    assert problem["limit"] == 16
    assert str(problem["field"]).startswith("forwardedProps/a/a")


@pytest.mark.parametrize("levels", [65, 253, 300, 1024])
def test_bodies_the_encoder_would_choke_on_are_a_400(levels: int) -> None:
    """With the default limit (64): the request of such a body used to fail encoding (500)."""
    with pytest.raises(InvalidInput) as err:
        parse_input(orjson.dumps(nested(levels)) if levels < 255 else deep_raw(levels),
                    SETTINGS, InputLimits())
    assert err.value.code == "json_too_deep"
    assert err.value.body()["limit"] == 64


def test_a_body_of_more_objects_and_arrays_than_the_limit_is_refused_before_encoding() -> None:
    """1 MiB of nested empty arrays, within the depth limit: pydantic wrote it in 2 s (4 s
    for the route), the instance frozen (found by review). Past the default 32,768
    containers it is a 400 before anything is encoded."""
    nest = "[]"
    for _ in range(58):
        nest = f"[{nest}]"
    state = ",".join([nest] * (1_048_000 // (len(nest) + 1)))
    raw = (b'{"threadId":"t","runId":"r","messages":[],"tools":[],"context":[],'
           b'"forwardedProps":{},"state":[' + state.encode() + b"]}")
    with pytest.raises(InvalidInput) as err:
        parse_input(raw, SETTINGS, InputLimits())
    problem = err.value.body()
    assert (problem["code"], problem["limit"]) == ("json_too_complex", 32_768)
    assert "AGUI_MAX_JSON_CONTAINERS" in str(problem["detail"])
    flat = b'{"threadId":"t","runId":"r","messages":[],"state":[' + b",".join(
        [b"[]"] * 32_765) + b"]}"  # the body, messages, state: 32,768 with these
    assert parse_input(flat, SETTINGS, InputLimits()).state


def test_deeper_than_the_parser_goes_is_json_too_deep_too() -> None:
    problem = refused(deep_raw(1100))
    assert (problem["code"], problem["field"], problem["limit"]) == ("json_too_deep", "/", 16)


def test_a_body_at_the_default_depth_still_makes_a_request() -> None:
    run_input = parse_input(orjson.dumps(nested(64)), SETTINGS, InputLimits())
    request = RunRequest.model_validate({"requestId": "q", "agent": "a", "input": run_input,
                                         "submittedAt": "2026-01-01T00:00:00Z"})
    assert encode(request)


def test_a_long_field_path_is_cut_in_the_problem() -> None:
    doc = body(forwardedProps={long(500): nested(20)["forwardedProps"]})
    problem = refused(doc)
    assert len(str(problem["field"])) <= 121
    assert str(problem["field"]).endswith("…")


def test_path_ids_are_bounded_too() -> None:
    check_ids(LIMITS, {"threadId": long(32), "runId": "r"})
    with pytest.raises(InvalidInput) as err:
        check_ids(LIMITS, {"threadId": "t", "runId": long(33)})
    assert err.value.body()["field"] == "runId"


def deep_raw(levels: int) -> bytes:
    """A body whose forwardedProps nest ``levels`` lists deep (orjson would not dump it)."""
    return (b'{"threadId":"t","runId":"r","messages":[],"forwardedProps":'
            + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}")


@pytest.mark.parametrize("number", ["123456789012345678901234567890", "18446744073709551616",
                                    "-9223372036854775809", "9" * 300])
def test_an_integer_no_64_bit_integer_holds_is_refused_not_rounded(number: str) -> None:
    """orjson read it as a float, so the agent got another number than the client sent."""
    raw = orjson.dumps(body(forwardedProps={"n": 0})).replace(b'"n":0', f'"n":{number}'.encode())
    problem = refused(raw)
    assert problem["code"] == "invalid_input"
    assert "outside the 64-bit range" in str(problem["detail"])


@pytest.mark.parametrize("number", [18446744073709551615, -9223372036854775808])
def test_the_64_bit_integers_at_either_end_are_carried_unchanged(number: int) -> None:
    raw = orjson.dumps(body(forwardedProps={"n": 0})).replace(b'"n":0', f'"n":{number}'.encode())
    run_input = parse_input(raw, SETTINGS, LIMITS)
    assert run_input.forwarded_props == {"n": number}


@pytest.mark.parametrize("member", ["threadId", "runId"])
def test_an_empty_thread_or_run_id_is_refused(member: str) -> None:
    """It was admitted and run, and then no route could reach it: ``/threads//…`` matches
    none (found by probing)."""
    problem = refused(body(**{member: ""}))
    assert (problem["code"], problem["field"]) == ("invalid_input", member)
