"""Reading raw ``requests`` records: invalid input, key mismatch, dead letters."""

from __future__ import annotations

import orjson
import pytest
from gatekeeper_builders import NOW, request

from contracts import encode
from contracts.limits import InputLimits, check_run_request
from services.gatekeeper.intake import Accepted, Refused, Unreadable, read_request

pytestmark = pytest.mark.unit

AGENTS = frozenset({"scripted", "approval"})
GOOD = encode(request("q1", "r1"))


def read(
    value: bytes | None,
    key: bytes | None = b"t1",
    *,
    max_bytes: int = 65_536,
    agents: frozenset[str] | None = AGENTS,
) -> Accepted | Refused | Unreadable:
    return read_request(key, value, NOW, max_bytes=max_bytes, agents=agents)


def wire(**changes: object) -> bytes:
    doc = orjson.loads(GOOD)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = doc
        for p in parents:
            target = target[p]
        if value is None:
            del target[leaf]
        else:
            target[leaf] = value
    return orjson.dumps(doc)


def test_a_good_record_is_accepted() -> None:
    read_back = read(GOOD)
    assert isinstance(read_back, Accepted)
    assert read_back.request == request("q1", "r1")


def test_any_agent_is_accepted_when_the_agent_set_is_unknown() -> None:
    assert isinstance(read(wire(agent="other"), agents=None), Accepted)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (wire(input__messages=None), "messages"),
        (wire(input__resume=[{"interruptId": "a", "status": "abandoned"}]), "status"),
        (wire(schemaVersion=2), "schemaVersion"),
        (wire(submittedAt="yesterday"), "submittedAt"),
        (wire(input__resume=[{"interruptId": "a", "status": "resolved"}], input__runId=7), "runId"),
        (b'{"requestId": "q1", "input": {"threadId": "t1", "runId": "r1"', "invalid_json"),
    ],
    ids=[
        "missing-messages",
        "abandoned-status",
        "future-schema",
        "bad-date",
        "runId-type",
        "truncated-json-with-ids",
    ],
)
def test_schema_invalid_input_is_an_invalid_input_decision(value: bytes, fragment: str) -> None:
    read_back = read(value)
    if fragment == "invalid_json":  # truncated JSON: no ids readable, so a dead letter
        assert isinstance(read_back, Unreadable)
        assert read_back.code == "invalid_json"
        return
    assert isinstance(read_back, Refused)
    d = read_back.decision
    assert (d.verdict, d.code, d.request_id, d.thread_id) == (
        "rejected",
        "invalid_input",
        "q1",
        "t1",
    )
    assert fragment in d.message
    assert d.decided_at == NOW


def test_an_unknown_agent_is_invalid_input_naming_the_known_ones() -> None:
    read_back = read(wire(agent="nobody"))
    assert isinstance(read_back, Refused)
    assert read_back.decision.code == "invalid_input"
    assert "'nobody'" in read_back.decision.message
    assert "approval, scripted" in read_back.decision.message


@pytest.mark.parametrize("key", [b"t2", None, b"\xff\xfe"], ids=["other", "none", "not-utf8"])
def test_a_key_other_than_the_thread_id_is_key_mismatch(key: bytes | None) -> None:
    read_back = read(GOOD, key=key)
    assert isinstance(read_back, Refused)
    d = read_back.decision
    assert (d.code, d.thread_id, d.run_id, d.agent) == ("key_mismatch", "t1", "r1", "scripted")


@pytest.mark.parametrize("key", [b"\xff<s>", b"\xfe<s>", b"\xef\xbf<s>"],
                         ids=["ff", "fe", "cut"])
def test_a_key_that_only_decodes_lossily_to_the_thread_id_is_key_mismatch(key: bytes) -> None:
    """Each of these keys decodes, with replacement, to the threadId "\ufffd<s>"; the key's
    bytes decide the partition, so only the threadId's own bytes are its key."""
    thread = "\ufffd<s>"
    assert key.decode("utf-8", "replace") == thread
    value = wire(input__threadId=thread)
    read_back = read(value, key=key)
    assert isinstance(read_back, Refused)
    assert read_back.decision.code == "key_mismatch"
    assert repr(key) in read_back.decision.message
    assert isinstance(read(value, key=thread.encode()), Accepted)


def test_invalid_input_wins_over_key_mismatch() -> None:
    read_back = read(wire(input__messages=None), key=b"t2")
    assert isinstance(read_back, Refused)
    assert read_back.decision.code == "invalid_input"


def test_an_oversize_record_is_invalid_input_when_its_ids_can_be_read() -> None:
    big = wire(input__forwardedProps={"blob": "x" * 5000})
    read_back = read(big, max_bytes=4096)
    assert isinstance(read_back, Refused)
    assert read_back.decision.code == "invalid_input"
    assert f"{len(big)} bytes" in read_back.decision.message
    assert "4096" in read_back.decision.message


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[1, 2]",
        b'"text"',
        wire(requestId=None),
        wire(input__threadId=None),
        wire(requestId=5),
        wire(input=None),
        b"\xff\xfe\x00",
    ],
    ids=[
        "garbage",
        "array",
        "string",
        "no-request-id",
        "no-thread",
        "numeric-request-id",
        "no-input",
        "binary",
    ],
)
def test_a_record_naming_no_request_or_thread_is_unreadable(value: bytes) -> None:
    read_back = read(value)
    assert isinstance(read_back, Unreadable)
    assert read_back.reason
    assert read_back.code in {"invalid_json", "schema_invalid"}


def test_an_empty_or_huge_unreadable_record_is_a_dead_letter() -> None:
    assert read(None) == Unreadable("empty_record", "the record has no value (a tombstone?)")
    huge = read(b"x" * 5000, max_bytes=4096)
    assert isinstance(huge, Unreadable)
    assert huge.code == "oversize"


LONG = "t" * 400


@pytest.mark.parametrize(
    ("value", "key", "field"),
    [
        (wire(input__threadId=LONG), LONG.encode(), "input/threadId"),
        (wire(input__runId="r" * 257), b"t1", "input/runId"),
        (wire(requestId="q" * 300), b"t1", "requestId"),
        (wire(principal="p" * 257), b"t1", "principal"),
        (wire(input__resume=[{"interruptId": "i" * 300, "status": "cancelled"}]), b"t1",
         "input/resume/0/interruptId"),
    ],
)
def test_an_id_over_the_limit_is_refused_with_the_limits_own_detail(
    value: bytes, key: bytes, field: str
) -> None:
    read_back = read(value, key)
    assert isinstance(read_back, Refused)
    decision = read_back.decision
    assert (decision.verdict, decision.code) == ("rejected", "invalid_input")
    broken = check_run_request(orjson.loads(value), InputLimits())
    assert broken is not None
    assert broken.field == field
    assert decision.message == broken.detail
    assert "AGUI_MAX_ID_LENGTH" in decision.message


def test_json_nested_past_the_depth_limit_is_refused_before_the_schema() -> None:
    deep: object = "leaf"
    for _ in range(80):
        deep = {"d": deep}
    read_back = read(wire(input__forwardedProps=deep))
    assert isinstance(read_back, Refused)
    assert read_back.decision.code == "invalid_input"
    assert "AGUI_MAX_JSON_DEPTH" in read_back.decision.message
    assert read_back.decision.request_id == "q1"


def test_the_configured_limits_are_the_ones_applied() -> None:
    value = wire(input__runId="r" * 20)
    assert isinstance(read(value), Accepted)
    tight = read_request(b"t1", value, NOW, max_bytes=65_536, agents=AGENTS,
                         limits=InputLimits(max_id_length=10))
    assert isinstance(tight, Refused)
    assert "at most 10" in tight.decision.message


def test_a_record_over_the_limits_naming_no_request_is_a_dead_letter() -> None:
    value = orjson.dumps({"input": {"threadId": "t1", "runId": "r" * 300}})
    read_back = read(value)
    assert isinstance(read_back, Unreadable)
    assert read_back.code == "id_too_long"
