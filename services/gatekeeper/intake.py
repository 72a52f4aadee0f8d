"""Reading a ``requests`` record: the checks that need no thread state.

Before any rule looks at a thread, the raw record must be a usable request:
not oversize, valid JSON, within the input limits (``contracts.limits``: no id
or name longer than ``AGUI_MAX_ID_LENGTH``, no nesting deeper than
``AGUI_MAX_JSON_DEPTH``; checked before the schema, so a client that wrote
past the consumer service's edge gets the same answer as one it refused),
a valid ``RunRequest`` (schema version, the
``RunAgentInput`` wire form), naming an agent that has a dispatch topic, and
keyed by its own ``input.threadId``, byte for byte (the key decides the
partition, and so which gatekeeper instance holds the thread). ``read_request`` turns a record
into exactly one of:

- ``Accepted``: a request for ``rules.decide``;
- ``Refused``: an ``invalid_input`` or ``key_mismatch`` decision, made here
  because it needs no thread and changes none;
- ``Unreadable``: not even a requestId and threadId could be read, so no
  decision can name it; the record goes to the dead-letter topic.

Pure: no I/O, the clock is an argument.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from contracts import Decision, DecodeError, RejectionCode, RunRequest
from contracts.codec import load_json, validation_detail
from contracts.limits import (
    InputLimits,
    bracket_count,
    check_run_request,
)

DEFAULT_LIMITS = InputLimits()


@dataclass(frozen=True, slots=True)
class Accepted:
    """A well-formed request, keyed by its thread, for an agent that exists."""

    request: RunRequest
    raw: dict[str, Any] | None
    """The record's JSON object, as parsed, for a dispatch to reuse; None when it is not
    exactly what the request encodes to (``reusable``)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A request rejected before any thread is consulted."""

    decision: Decision


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A record no decision can answer (no requestId or threadId): a dead letter."""

    code: str
    reason: str


Intake = Accepted | Refused | Unreadable


@dataclass(frozen=True, slots=True)
class _Ids:
    """What could be read from a record that failed validation."""

    request_id: str
    thread_id: str
    run_id: str | None
    agent: str | None


def read_request(
    key: bytes | None,
    value: bytes | None,
    now: datetime,
    *,
    max_bytes: int,
    agents: Set[str] | None = None,
    limits: InputLimits = DEFAULT_LIMITS,
) -> Intake:
    """Read one ``requests`` record (``agents``: the agents with a dispatch topic)."""
    if value is None:
        return Unreadable("empty_record", "the record has no value (a tombstone?)")
    if len(value) > max_bytes:
        return _invalid(
            value,
            "oversize",
            f"the record is {len(value)} bytes, over the limit of {max_bytes}",
            now,
        )
    try:
        raw = load_json(value)
    except DecodeError as exc:
        return _invalid(value, exc.reason, f"{exc.reason}: {exc.detail}", now)
    broken = check_run_request(raw, limits, size_hint=bracket_count(value)) if isinstance(
        raw, dict) else None
    if broken is not None:
        return _refused(_ids_of(raw), broken.code, broken.detail, now)
    try:
        request = RunRequest.model_validate(raw)
    except ValidationError as exc:
        return _invalid(value, "schema_invalid", f"schema_invalid: {validation_detail(exc)}", now)
    if agents is not None and request.agent not in agents:
        known = ", ".join(sorted(agents)) or "none"
        return Refused(
            refusal(
                request,
                "invalid_input",
                f"no agent {request.agent!r} is deployed (no dispatch topic; known: {known})",
                now,
            )
        )
    thread_id = request.input.thread_id
    if key != thread_id.encode("utf-8", "surrogatepass"):  # bytes: the key is the partition
        shown = "no key" if key is None else f"key {_shown_key(key)}"
        return Refused(
            refusal(
                request,
                "key_mismatch",
                f"the record has {shown} but input.threadId is {thread_id!r}; requests must be "
                "keyed by their threadId",
                now,
            )
        )
    return Accepted(request, raw if reusable(value, raw) else None)


REQUEST_MEMBERS = frozenset(RunRequest.model_json_schema(by_alias=True)["properties"])
"""A RunRequest record's own top-level members, in wire form."""


def reusable(value: bytes, raw: dict[str, Any]) -> bool:
    """Whether a request record's JSON may become its dispatch as it is: no ``null``
    anywhere (the bytes are searched: a string holding the word costs only a re-encoding)
    and no top-level member of its own. Another writer's record carried ``"principal":
    null``, ``"parentRunId": null`` and members of its own into the dispatch and the
    run's ``RUN_STARTED`` echo, which the reference client then refused (found by
    probing); such a record is encoded again from what it decoded to."""
    return b"null" not in value and raw.keys() <= REQUEST_MEMBERS


def _shown_key(key: bytes) -> str:
    """A record key for a message: as text when it is UTF-8, else as the bytes it is (a
    lossy decode could show the very threadId the key is not)."""
    try:
        return repr(key.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(key)


def refusal(request: RunRequest, code: RejectionCode, message: str, now: datetime) -> Decision:
    """A rejection of ``request`` that needs no thread (and is not remembered by one)."""
    return Decision(
        request_id=request.request_id,
        thread_id=request.input.thread_id,
        run_id=request.input.run_id,
        agent=request.agent,
        verdict="rejected",
        code=code,
        message=message,
        principal=request.principal,
        policy=request.policy,
        decided_at=now,
    )


def _invalid(value: bytes, code: str, message: str, now: datetime) -> Refused | Unreadable:
    return _refused(_read_ids(value), code, message, now)


def _refused(ids: _Ids | None, code: str, message: str, now: datetime) -> Refused | Unreadable:
    """An ``invalid_input`` rejection naming ``ids``, or a dead letter when there are none."""
    if ids is None:
        return Unreadable(code, f"{message}; no requestId and input.threadId could be read")
    return Refused(
        Decision(
            request_id=ids.request_id,
            thread_id=ids.thread_id,
            run_id=ids.run_id,
            agent=ids.agent,
            verdict="rejected",
            code="invalid_input",
            message=message,
            decided_at=now,
        )
    )


def _read_ids(value: bytes) -> _Ids | None:
    """requestId and input.threadId (runId and agent when present) from raw JSON."""
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return _ids_of(raw)


def _ids_of(raw: object) -> _Ids | None:
    """``_read_ids`` of parsed JSON."""
    if not isinstance(raw, dict) or not isinstance(raw.get("input"), dict):
        return None
    request_id, thread_id = _text(raw.get("requestId")), _text(raw["input"].get("threadId"))
    if request_id is None or thread_id is None:
        return None
    return _Ids(request_id, thread_id, _text(raw["input"].get("runId")), _text(raw.get("agent")))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value != "" else None
