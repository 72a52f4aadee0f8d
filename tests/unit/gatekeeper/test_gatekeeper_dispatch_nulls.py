"""A request record another writer made, with explicit nulls and members of its own: its
dispatch (and the run's ``RUN_STARTED`` echo of it) carried them, failing the published
schemas and the reference client's (found by probing). Such a record is encoded again
from what it decoded to; a clean one is still reused as it is."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from contracts import decode
from contracts.records import Dispatch, ThreadState
from services.gatekeeper import wire
from services.gatekeeper.intake import Accepted, read_request, reusable
from services.gatekeeper.rules import Policy, decide

pytestmark = pytest.mark.unit

SCHEMAS = Path(__file__).resolve().parents[3] / "contracts" / "schema"
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _nulls(value: object, path: str = "$") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{path}[{i}]")]
    return []


def _dispatch_of(record: dict[str, Any]) -> dict[str, Any]:
    value = orjson.dumps(record)
    intake = read_request(record["input"]["threadId"].encode(), value, NOW,
                          max_bytes=1 << 20, agents={"scripted"})
    assert isinstance(intake, Accepted), intake
    fresh = ThreadState(thread_id=record["input"]["threadId"])
    outcome = decide(fresh, intake.request, NOW, Policy())
    assert outcome.dispatch is not None, outcome.decision
    return orjson.loads(wire.dispatch(outcome.dispatch, intake.raw))


RECORD = {
    "schemaVersion": 1, "requestId": "req-1", "agent": "scripted",
    "submittedAt": "2026-12-04T12:00:00Z", "principal": None, "keyName": None,
    "input": {"threadId": "t-null", "runId": "r1", "parentRunId": None, "state": None,
              "tools": None,
              "messages": [{"id": "m1", "role": "user", "content": "hi", "name": None}]},
    "junkKey": {"a": 1},
}


def test_dispatch_written_by_the_gatekeeper_carries_no_null_nor_a_member_of_its_own() -> None:
    doc = _dispatch_of(RECORD)
    assert _nulls(doc) == []
    assert "junkKey" not in doc


def test_a_clean_record_is_reused_as_it_is() -> None:
    clean = {k: v for k, v in RECORD.items() if v is not None and k != "junkKey"}
    clean["input"] = {"threadId": "t-clean", "runId": "r1", "messages": [
        {"id": "m1", "role": "user", "content": "hi"}], "forwardedProps": {"kept": [1]}}
    value = orjson.dumps(clean)
    intake = read_request(b"t-clean", value, NOW, max_bytes=1 << 20, agents={"scripted"})
    assert isinstance(intake, Accepted)
    assert intake.raw == clean
    assert not reusable(b'{"input": {"note": "null"}}', {"input": {}})


def test_dispatch_written_by_the_gatekeeper_validates_against_dispatch_schema() -> None:
    doc = _dispatch_of(RECORD)
    schema = json.loads((SCHEMAS / "dispatch.schema.json").read_text())
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
    assert errors == []


def test_run_started_echo_of_that_dispatch_carries_no_null() -> None:
    # services/producer/host.py Dispatched.input_wire: RUN_STARTED.input is the dispatch's
    # "input" object as the record holds it
    doc = _dispatch_of(RECORD)
    decode(Dispatch, orjson.dumps(doc))  # the worker reads it fine
    assert _nulls(doc["input"]) == []
