"""A thread's interrupt audit trail, rebuilt from its records: raised, then answered.

Auditors ask of a human-in-the-loop thread what was asked, by which run and
agent, and who answered what, when. Everything needed is already on the
topics: a ``RUN_FINISHED`` whose outcome is ``interrupt`` lists the
interrupts a run raised (the event's time is when; the ``agui-agent``
header is which agent), the ``RUN_STARTED`` of a resuming run echoes its
input with every ``resume`` entry (status, payload, and who answered it
under ``agui-relay.principal``, written by the gatekeeper: the tenant, or
``tenant#name`` for an API key with a name), and the admitting decision
carries the request's ``principal``, ``keyName`` and ``policy``
(``expiry`` when the expiry policy cancelled the interrupts itself) and the
time it was decided. ``audit(events, decisions)`` pairs them: one
``AuditEntry`` per raised interrupt, in the order raised, with its
``Answer`` once one was admitted. An answer is identified by a sha256
digest of its payload's canonical JSON (sorted keys, no spaces), so the
trail can prove which answer was given without repeating it.

Pure: parsed records in (``OpsRecord``), entries out; no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

import orjson

from contracts.headers import AGENT
from contracts.records import EXPIRY_ANSWERER, PRINCIPAL_KEY, identity
from services.kafka.records import OpsRecord

Status = Literal["open", "resolved", "cancelled", "expired"]
"""``expired``: cancelled by the expiry policy, no person answered."""


def digest(payload: Any) -> str:
    """``sha256:<hex>`` of ``payload`` as canonical JSON (sorted keys, no whitespace)."""
    raw = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    return f"sha256:{hashlib.sha256(raw).hexdigest()}"


@dataclass(frozen=True, slots=True)
class Answer:
    """How an interrupt was answered: by the resume a run was admitted with."""

    status: Literal["resolved", "cancelled"]
    run_id: str
    by: str | None
    at_ms: int
    digest: str | None
    policy: str | None = None

    def wire(self) -> dict[str, Any]:
        body = {"status": self.status, "runId": self.run_id, "by": self.by, "at": self.at_ms,
                "digest": self.digest, "policy": self.policy}
        return {k: v for k, v in body.items() if v is not None}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One raised interrupt and, once answered, its answer."""

    interrupt_id: str
    run_id: str
    agent: str | None
    raised_at_ms: int
    reason: str | None = None
    message: str | None = None
    tool_call_id: str | None = None
    subagent_run_id: str | None = None
    response_schema: Any = None
    expires_at: str | None = None
    answer: Answer | None = None

    @property
    def status(self) -> Status:
        if self.answer is None:
            return "open"
        if self.answer.policy == "expiry" or self.answer.by == EXPIRY_ANSWERER:
            return "expired"
        return self.answer.status

    def wire(self) -> dict[str, Any]:
        """camelCase JSON, absent fields omitted."""
        body: dict[str, Any] = {
            "interruptId": self.interrupt_id, "status": self.status, "runId": self.run_id,
            "agent": self.agent, "raisedAt": self.raised_at_ms, "reason": self.reason,
            "message": self.message, "toolCallId": self.tool_call_id,
            "subagentRunId": self.subagent_run_id, "responseSchema": self.response_schema,
            "expiresAt": self.expires_at,
            "answer": self.answer.wire() if self.answer is not None else None}
        return {k: v for k, v in body.items() if v is not None}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _time_ms(record: OpsRecord) -> int:
    stamp = record.fields.get("timestamp")
    return stamp if isinstance(stamp, int) and not isinstance(stamp, bool) \
        else record.timestamp_ms


def _iso_ms(text: Any) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        return None


def _raised(record: OpsRecord) -> list[AuditEntry]:
    value = record.fields
    outcome = value.get("outcome")
    if not isinstance(outcome, dict) or outcome.get("type") != "interrupt":
        return []
    run_id = _text(value.get("runId")) or ""
    found = []
    for item in outcome.get("interrupts") or ():
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        found.append(AuditEntry(
            interrupt_id=item["id"], run_id=run_id, agent=record.headers.get(AGENT),
            raised_at_ms=_time_ms(record), reason=_text(item.get("reason")),
            message=_text(item.get("message")), tool_call_id=_text(item.get("toolCallId")),
            subagent_run_id=_text(item.get("subagentRunId")),
            response_schema=item.get("responseSchema"), expires_at=_text(item.get("expiresAt"))))
    return found


def _admissions(decisions: Iterable[OpsRecord]) -> dict[str, dict[str, Any]]:
    """The admitting decision of each run, by run id."""
    found: dict[str, dict[str, Any]] = {}
    for record in decisions:
        value = record.fields
        run_id = value.get("runId")
        if value.get("verdict") == "admitted" and isinstance(run_id, str):
            found.setdefault(run_id, value)
    return found


def _answers(record: OpsRecord, admissions: dict[str, dict[str, Any]]
             ) -> list[tuple[str, Answer]]:
    value = record.fields
    run_input = value.get("input")
    run_id = value.get("runId")
    if not isinstance(run_input, dict) or not isinstance(run_id, str):
        return []
    decision = admissions.get(run_id, {})
    at_ms = _iso_ms(decision.get("decidedAt")) or _time_ms(record)
    found = []
    for entry in run_input.get("resume") or ():
        if not isinstance(entry, dict) or not isinstance(entry.get("interruptId"), str):
            continue
        status: Literal["resolved", "cancelled"] = (
            "resolved" if entry.get("status") == "resolved" else "cancelled")
        metadata = entry.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        by = _text(metadata.get(PRINCIPAL_KEY)) or identity(
            _text(decision.get("principal")), _text(decision.get("keyName")))
        payload = entry.get("payload")
        found.append((entry["interruptId"], Answer(
            status=status, run_id=run_id, by=by, at_ms=at_ms,
            digest=digest(payload) if payload is not None else None,
            policy=_text(decision.get("policy")))))
    return found


def audit(events: Iterable[OpsRecord], decisions: Iterable[OpsRecord]) -> list[AuditEntry]:
    """Every interrupt the events raised, in order, each with its answer when admitted.

    ``events`` in topic order (one partition: the thread's); an answer is
    paired with the latest unanswered raise of its interrupt id before it.
    """
    admissions = _admissions(decisions)
    entries: list[AuditEntry] = []
    waiting: dict[str, int] = {}
    for record in events:
        kind = record.fields.get("type")
        if kind == "RUN_FINISHED":
            for entry in _raised(record):
                waiting[entry.interrupt_id] = len(entries)
                entries.append(entry)
        elif kind == "RUN_STARTED":
            for interrupt_id, answer in _answers(record, admissions):
                index = waiting.pop(interrupt_id, None)
                if index is not None:
                    entries[index] = replace(entries[index], answer=answer)
    return entries

