"""Golden files pin the exact wire bytes of one representative instance per record.

``tests/golden/<record>.json`` holds ``contracts.encode(sample)`` followed by
one newline. A change to an envelope, to the codec or to ag-ui-protocol that
moves a byte fails here, and so does a golden file that no longer decodes to
the same model or no longer validates against the generated JSON Schema.
After an intended wire change, rewrite them with
``.venv/bin/python tests/unit/contracts/test_contracts_golden.py`` and review the diff.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    ToolCall,
    UserMessage,
)
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:  # when run as a script to rewrite the golden files
    sys.path.insert(0, str(REPO))

from contracts import (  # noqa: E402
    ControlCommand,
    DeadLetter,
    Decision,
    Dispatch,
    EventHeaders,
    OpenInterrupt,
    RememberedDecision,
    RunRequest,
    ThreadState,
    decode,
    decode_event,
    encode,
    encode_event,
)
from contracts.generate import SCHEMA_DIR  # noqa: E402
from contracts.headers import header_value  # noqa: E402

pytestmark = pytest.mark.unit

GOLDEN = REPO / "tests" / "golden"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 3, 1, 12, 0, 1, 250000, tzinfo=UTC)

APPROVAL = Interrupt(
    id="int-approve-1",
    reason="tool_approval",
    message="Delete 3 files in /tmp/build?",
    tool_call_id="call-1",
    response_schema={
        "type": "object",
        "properties": {"approved": {"type": "boolean"}},
        "required": ["approved"],
    },
    expires_at="2026-03-01T12:15:00Z",
    metadata={"risk": "high"},
)
BARE = Interrupt(id="int-input-2", reason="input_required")
"""Every optional field of the AG-UI Interrupt omitted."""

FIRST_INPUT = RunAgentInput(
    thread_id="thread-1",
    run_id="run-1",
    messages=[UserMessage(id="msg-1", content="Clean up the build folder")],
)

RESUME_INPUT = RunAgentInput(
    thread_id="thread-1",
    run_id="run-2",
    parent_run_id="run-1",
    messages=[
        UserMessage(id="msg-1", content="Clean up the build folder"),
        AssistantMessage(
            id="msg-2",
            tool_calls=[ToolCall(id="call-1", function=FunctionCall(
                name="delete_files", arguments='{"paths":["/tmp/build"]}'))],
        ),
    ],
    state={"step": 2},
    forwarded_props={"ui": "console"},
    resume=[
        ResumeEntry(interrupt_id="int-approve-1", status="resolved",
                    payload={"approved": True}, metadata={"signedBy": "ops"}),
        ResumeEntry(interrupt_id="int-input-2", status="cancelled"),
    ],
)


def samples() -> dict[str, BaseModel]:
    """The golden instances by file stem (the same stems as contracts/schema)."""
    request = RunRequest(request_id="req-2", agent="approval", input=RESUME_INPUT,
                         submitted_at=T0, principal="tenant-a", key_name="alice")
    return {
        "run-request": request,
        "dispatch": Dispatch(
            **dict(request), warnings=["resume entry int-9 names no open interrupt"],
            decided_at=T1,
        ),
        "decision": Decision(
            request_id="req-3", thread_id="thread-1", run_id="run-3", agent="approval",
            verdict="rejected", code="uncovered_interrupts",
            message="interrupt int-input-2 is not answered", interrupt_ids=["int-input-2"],
            principal="tenant-a", key_name="alice", decided_at=T1,
        ),
        "thread-state": ThreadState(
            thread_id="thread-1", status="interrupted", agent="approval", run_id="run-1",
            parent_run_id="run-0", interrupted_run_id="run-1",
            open_interrupts=[OpenInterrupt(run_id="run-1", interrupt=APPROVAL, opened_at=T1),
                             OpenInterrupt(run_id="run-1", interrupt=BARE)],
            recent_run_ids=["run-1"],
            lapsed=["int-0"],
            recent_decisions=[RememberedDecision(
                request_id="expiry:run-0", run_id="expired-0", verdict="admitted",
                message="admitted", principal="tenant-a", policy="expiry", decided_at=T0)],
            run_started_at=T0, updated_at=T1,
        ),
        "control-command": ControlCommand(thread_id="thread-1", run_id="run-2",
                                          requested_by="cli:ops", requested_at=T1),
        "dead-letter": DeadLetter(
            source_topic="agui.requests", partition=3, offset=42, key="thread-1",
            value='{"requestId": ', headers={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16
                                              + "-01"},
            reason="invalid JSON: unexpected end of input", code="invalid_json",
            service="gatekeeper", failed_at=T1,
        ),
        "event": RunFinishedEvent(
            thread_id="thread-1", run_id="run-1",
            outcome=RunFinishedInterruptOutcome(interrupts=[APPROVAL, BARE]),
        ),
    }


HEADERS = EventHeaders(run_id="run-1", event_type="RUN_FINISHED", agent="approval", seq=7,
                       traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01")
RECORD_TYPES: dict[str, type[BaseModel]] = {
    "run-request": RunRequest, "dispatch": Dispatch, "decision": Decision,
    "thread-state": ThreadState, "control-command": ControlCommand, "dead-letter": DeadLetter,
}
STEMS = sorted(samples())


def wire(stem: str, model: BaseModel) -> bytes:
    return (encode_event(model) if stem == "event" else encode(model)) + b"\n"


def headers_wire() -> bytes:
    pairs = [[name, value.decode()] for name, value in HEADERS.encode()]
    return orjson.dumps(pairs) + b"\n"


def golden(name: str) -> bytes:
    path = GOLDEN / f"{name}.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `.venv/bin/python {Path(__file__).relative_to(REPO)}`")
    return path.read_bytes()


def date_time(value: object) -> bool:
    """RFC 3339 date-time (jsonschema checks this format only with an extra package)."""
    if not isinstance(value, str):
        return True
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return False
    return "T" in value.upper() and parsed.tzinfo is not None


def validator(stem: str) -> jsonschema.Draft202012Validator:
    schema: dict[str, Any] = orjson.loads((SCHEMA_DIR / f"{stem}.schema.json").read_bytes())
    checker = jsonschema.FormatChecker()
    checker.checks("date-time")(date_time)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=checker)


@pytest.mark.parametrize("stem", STEMS)
def test_encoding_matches_the_golden_bytes(stem: str) -> None:
    assert wire(stem, samples()[stem]) == golden(stem), (
        f"the wire form of {stem} changed; if intended, rewrite the golden files "
        f"(see {Path(__file__).name}) and review the diff"
    )


@pytest.mark.parametrize("stem", STEMS)
def test_golden_bytes_decode_back_to_the_same_model(stem: str) -> None:
    data = golden(stem)
    decoded = decode_event(data) if stem == "event" else decode(RECORD_TYPES[stem], data)
    assert decoded == samples()[stem]


@pytest.mark.parametrize("stem", STEMS)
def test_golden_bytes_validate_against_the_generated_schema(stem: str) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator(stem).iter_errors(orjson.loads(golden(stem)))]
    assert errors == []


def test_event_headers_match_the_golden_pairs() -> None:
    assert headers_wire() == golden("event-headers")
    pairs = [(name, value.encode()) for name, value in orjson.loads(golden("event-headers"))]
    assert EventHeaders.decode(pairs) == HEADERS


def test_a_null_header_value_reads_as_absent() -> None:
    pairs: list[tuple[str, bytes | None]] = [
        (name, None if name == "agui-seq" else value.encode())
        for name, value in orjson.loads(golden("event-headers"))]
    assert header_value(pairs, "agui-seq") is None
    assert header_value(pairs, "agui-run-id") == HEADERS.run_id
    assert EventHeaders.decode(pairs) is None


def test_event_headers_validate_against_the_schema_in_the_event_schema() -> None:
    schema = orjson.loads((SCHEMA_DIR / "event.schema.json").read_bytes())["x-kafka-headers"]
    as_object = dict(orjson.loads(golden("event-headers")))
    jsonschema.Draft202012Validator(schema).validate(as_object)
    without_run = {k: v for k, v in as_object.items() if k != "agui-run-id"}
    assert not jsonschema.Draft202012Validator(schema).is_valid(without_run)


def test_the_samples_cover_what_the_wire_must_show() -> None:
    """Guard the samples themselves: the cases the golden files exist to pin."""
    state = orjson.loads(golden("thread-state"))
    bare = state["openInterrupts"][1]["interrupt"]
    assert bare == {"id": "int-input-2", "reason": "input_required"}
    entries = orjson.loads(golden("run-request"))["input"]["resume"]
    assert entries[1] == {"interruptId": "int-input-2", "status": "cancelled"}
    assert orjson.loads(golden("event"))["outcome"]["type"] == "interrupt"
    assert state["parentRunId"] == "run-0"  # a delegation's child run
    assert [o.get("openedAt") for o in state["openInterrupts"]] == [
        "2026-03-01T12:00:01.250000Z", None]  # the second as a state written before it
    assert all(orjson.loads(golden(s))["schemaVersion"] == 1 for s in RECORD_TYPES)


def test_a_thread_state_written_before_parent_run_id_reads_as_no_parent() -> None:
    older = {k: v for k, v in orjson.loads(golden("thread-state")).items()
             if k != "parentRunId"}
    state = decode(ThreadState, orjson.dumps(older))
    assert state.parent_run_id is None
    assert b"parentRunId" not in encode(state)  # omitted when none, never null


def test_an_open_interrupt_written_before_opened_at_reads_as_undated() -> None:
    older = orjson.loads(golden("thread-state"))
    for opened in older["openInterrupts"]:
        opened.pop("openedAt", None)
    state = decode(ThreadState, orjson.dumps(older))
    assert [o.opened_at for o in state.open_interrupts] == [None, None]
    assert b"openedAt" not in encode(state)  # omitted when none, never null


def rewrite() -> None:
    """Write every golden file from the samples (after an intended wire change)."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for stem, model in samples().items():
        (GOLDEN / f"{stem}.json").write_bytes(wire(stem, model))
    (GOLDEN / "event-headers.json").write_bytes(headers_wire())
    print(f"wrote {len(samples()) + 1} files under {GOLDEN}")


if __name__ == "__main__":
    rewrite()
