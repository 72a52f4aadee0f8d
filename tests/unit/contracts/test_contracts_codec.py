"""The codec's failure modes: every unreadable record is a DecodeError with a reason.

The loops turn ``DecodeError.reason`` into a decision or a dead letter in one
place, so the reasons and the readability of ``detail`` are part of the
contract: ``invalid_json`` for bytes that are not JSON, ``schema_invalid`` for
JSON that is not the record, with the offending field named.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from ag_ui.core import RunAgentInput, RunErrorEvent, UserMessage

from contracts import (
    SCHEMA_VERSION,
    ControlCommand,
    Decision,
    DecodeError,
    RunRequest,
    ThreadState,
    decode,
    decode_event,
    encode,
    encode_event,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def request() -> RunRequest:
    return RunRequest(
        request_id="req-1", agent="scripted", submitted_at=NOW,
        input=RunAgentInput(thread_id="t-1", run_id="r-1",
                            messages=[UserMessage(id="m-1", content="hi")]),
    )


@pytest.mark.parametrize("data", [b"", b"{", b"not json", b'{"a": 1,}', b"\xff\xfe"])
def test_bytes_that_are_not_json_are_invalid_json(data: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(RunRequest, data)
    assert caught.value.reason == "invalid_json"
    assert caught.value.detail
    with pytest.raises(DecodeError) as event_caught:
        decode_event(data)
    assert event_caught.value.reason == "invalid_json"


def test_a_missing_field_is_schema_invalid_naming_the_field() -> None:
    wire = orjson.loads(encode(request()))
    del wire["requestId"]
    with pytest.raises(DecodeError) as caught:
        decode(RunRequest, orjson.dumps(wire))
    assert caught.value.reason == "schema_invalid"
    assert "requestId" in caught.value.detail
    assert "required" in caught.value.detail.lower()


def test_a_wrongly_typed_nested_field_is_schema_invalid_with_its_path() -> None:
    wire = orjson.loads(encode(request()))
    wire["input"]["messages"] = "not a list"
    with pytest.raises(DecodeError) as caught:
        decode(RunRequest, orjson.dumps(wire))
    assert caught.value.reason == "schema_invalid"
    assert "input.messages" in caught.value.detail
    assert str(caught.value).startswith("schema_invalid: ")


def test_many_errors_are_summarised_not_dumped() -> None:
    with pytest.raises(DecodeError) as caught:
        decode(Decision, b"{}")
    assert caught.value.reason == "schema_invalid"
    assert "(+1 more)" in caught.value.detail  # requestId, verdict, message, decidedAt
    assert caught.value.detail.count(";") == 2


@pytest.mark.parametrize("data", [b"[]", b"42", b'"text"', b"null"])
def test_json_that_is_not_an_object_is_schema_invalid(data: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(ControlCommand, data)
    assert caught.value.reason == "schema_invalid"


def test_an_unknown_event_type_is_schema_invalid() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_event(b'{"type": "NOT_AN_EVENT", "threadId": "t"}')
    assert caught.value.reason == "schema_invalid"
    with pytest.raises(DecodeError) as no_type:
        decode_event(b'{"message": "boom"}')
    assert no_type.value.reason == "schema_invalid"


def test_every_envelope_carries_schema_version_one() -> None:
    assert SCHEMA_VERSION == 1
    for model in (request(), ThreadState(thread_id="t-1"),
                  ControlCommand(thread_id="t", run_id="r", requested_by="x", requested_at=NOW),
                  Decision(request_id="q", verdict="admitted", message="ok", decided_at=NOW)):
        assert orjson.loads(encode(model))["schemaVersion"] == 1


def test_another_schema_version_is_refused_not_misread() -> None:
    wire = orjson.loads(encode(request()))
    wire["schemaVersion"] = 2
    with pytest.raises(DecodeError) as caught:
        decode(RunRequest, orjson.dumps(wire))
    assert caught.value.reason == "schema_invalid"
    assert "schemaVersion" in caught.value.detail


def test_unknown_members_of_an_envelope_are_dropped_but_kept_inside_ag_ui_payloads() -> None:
    wire = orjson.loads(encode(request()))
    wire["addedByANewerWriter"] = True
    wire["input"]["vendorExtension"] = {"k": 1}
    back = orjson.loads(encode(decode(RunRequest, orjson.dumps(wire))))
    assert "addedByANewerWriter" not in back
    assert back["input"]["vendorExtension"] == {"k": 1}


def test_events_round_trip_exactly_and_never_write_null() -> None:
    event = RunErrorEvent(message="worker lost", code="worker_lost")
    data = encode_event(event)
    assert orjson.loads(data) == {"type": "RUN_ERROR", "message": "worker lost",
                                  "code": "worker_lost"}
    assert decode_event(data) == event
