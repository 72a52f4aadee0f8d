"""Fast encoders for what the gatekeeper writes on every decision.

``contracts.encode`` goes through the AG-UI base model's wrap serializer
(which drops unset optionals) for every nested model, and that costs more
than deciding. The gatekeeper writes a decision, a thread state and, when
admitted, a dispatch for every request, so these three are built here as
plain dicts and dumped with orjson: the bytes of ``decision`` and ``state``
are identical to ``contracts.encode`` (a unit test holds them to it; AG-UI
objects nested in a state, the open interrupts and queued requests, still go
through the models). A dispatch is the admitted request exactly as its
record carried it, plus ``warnings``, ``handover`` and ``decidedAt``: the
request's JSON object is reused, not rebuilt from the models, but for its
resume entries, which name who answered them (``answerer``).
"""

from __future__ import annotations

from typing import Any

import orjson

from contracts import (
    Decision,
    Dispatch,
    OpenInterrupt,
    RememberedDecision,
    ThreadState,
    encode,
)
from contracts.codec import to_wire

OPTIONS = orjson.OPT_UTC_Z
"""UTC datetimes end in ``Z``, as pydantic writes them."""
ENVELOPE_ONLY = ("warnings", "handover", "decidedAt")
"""A dispatch's members the gatekeeper sets: a request's own (a client may write any
record) are dropped, never passed on."""


def decision(d: Decision) -> bytes:
    """``encode(d)``, faster."""
    doc = _verdict_doc(d, d.thread_id, d.agent)
    _put(doc, "replayed", d.replayed)
    return orjson.dumps(doc, option=OPTIONS)


def state(s: ThreadState) -> bytes:
    """``encode(s)``, faster."""
    doc: dict[str, Any] = {
        "schemaVersion": s.schema_version,
        "threadId": s.thread_id,
        "status": s.status,
    }
    _put(doc, "agent", s.agent)
    _put(doc, "principal", s.principal)
    _put(doc, "runId", s.run_id)
    _put(doc, "parentRunId", s.parent_run_id)
    _put(doc, "interruptedRunId", s.interrupted_run_id)
    doc["openInterrupts"] = [_opened(o) for o in s.open_interrupts]
    _put(doc, "lapsed", s.lapsed)
    doc["queued"] = [to_wire(q) for q in s.queued]
    doc["recentRunIds"] = s.recent_run_ids
    doc["recentDecisions"] = [_verdict_doc(r) for r in s.recent_decisions]
    _put(doc, "runStartedAt", s.run_started_at)
    _put(doc, "updatedAt", s.updated_at)
    return orjson.dumps(doc, option=OPTIONS)


def dispatch(d: Dispatch, request: dict[str, Any] | None) -> bytes:
    """The dispatch of an admitted request, from the request's own JSON object when known."""
    if request is None:
        return encode(d)
    doc = {k: v for k, v in request.items() if k not in ENVELOPE_ONLY}
    if d.input.resume and isinstance(doc.get("input"), dict):  # entries name who answered
        doc["input"] = {**doc["input"], "resume": [to_wire(e) for e in d.input.resume]}
    _put(doc, "warnings", d.warnings)
    if d.handover is not None:
        doc["handover"] = to_wire(d.handover)
    doc["decidedAt"] = d.decided_at
    return orjson.dumps(doc, option=OPTIONS)


def _opened(o: OpenInterrupt) -> dict[str, Any]:
    doc = {"schemaVersion": o.schema_version, "runId": o.run_id, "interrupt": to_wire(o.interrupt)}
    _put(doc, "openedAt", o.opened_at)
    return doc


def _verdict_doc(
    d: Decision | RememberedDecision, thread_id: str | None = None, agent: str | None = None
) -> dict[str, Any]:
    """The fields a decision and a remembered decision share, in declaration order."""
    doc: dict[str, Any] = {"schemaVersion": d.schema_version, "requestId": d.request_id}
    _put(doc, "threadId", thread_id)
    _put(doc, "runId", d.run_id)
    _put(doc, "agent", agent)
    doc["verdict"] = d.verdict
    _put(doc, "code", d.code)
    doc["message"] = d.message
    _put(doc, "interruptIds", d.interrupt_ids)
    _put(doc, "warnings", d.warnings)
    _put(doc, "principal", d.principal)
    _put(doc, "keyName", d.key_name)
    _put(doc, "policy", d.policy)
    doc["decidedAt"] = d.decided_at
    return doc


def _put(doc: dict[str, Any], key: str, value: object) -> None:
    if value is not None:
        doc[key] = value
