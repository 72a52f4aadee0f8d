"""The interrupt audit trail rebuilt from a thread's records (services.agui.audit)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import orjson

from services.agui.audit import audit, digest
from services.kafka.records import OpsRecord

_offset = iter(range(10**6))


def event(value: dict[str, Any], at: int, agent: str = "approval") -> OpsRecord:
    return OpsRecord("t.events", "events", 0, next(_offset), at, "th-1",
                     {"agui-agent": agent, "agui-run-id": str(value.get("runId"))}, value)


def decision(value: dict[str, Any]) -> OpsRecord:
    return OpsRecord("t.decisions", "decisions", 0, next(_offset), 0, "th-1", {}, value)


def interrupted(run: str, at: int, *interrupts: Any) -> OpsRecord:
    return event({"type": "RUN_FINISHED", "threadId": "th-1", "runId": run,
                  "outcome": {"type": "interrupt", "interrupts": list(interrupts)}}, at)


def started(run: str, at: int, *resume: dict[str, Any]) -> OpsRecord:
    run_input = {"threadId": "th-1", "runId": run, "messages": [], "resume": list(resume)}
    return event({"type": "RUN_STARTED", "threadId": "th-1", "runId": run,
                  "input": run_input}, at)


def answered(interrupt: str, status: str, who: str | None, payload: Any = None
             ) -> dict[str, Any]:
    entry: dict[str, Any] = {"interruptId": interrupt, "status": status}
    if payload is not None:
        entry["payload"] = payload
    if who is not None:
        entry["metadata"] = {"agui-relay.principal": who, "note": "kept"}
    return entry


def admitted(run: str, principal: str | None = None, policy: str | None = None,
             at: str = "2026-12-02T02:00:00+00:00", key_name: str | None = None) -> OpsRecord:
    value: dict[str, Any] = {"requestId": f"req-{run}", "runId": run, "verdict": "admitted",
                             "message": "ok", "decidedAt": at}
    if principal is not None:
        value["principal"] = principal
    if key_name is not None:
        value["keyName"] = key_name
    if policy is not None:
        value["policy"] = policy
    return decision(value)


DECIDED_MS = int(datetime(2026, 12, 2, 2, tzinfo=UTC).timestamp() * 1000)
APPROVE = {"id": "i1", "reason": "approval", "message": "Send the email?",
           "toolCallId": "call-1", "responseSchema": {"type": "object"},
           "expiresAt": "2026-12-03T00:00:00Z"}


def test_the_digest_is_sha256_of_canonical_json_whatever_the_key_order() -> None:
    expected = hashlib.sha256(b'{"a":1,"b":[true,null]}').hexdigest()
    assert digest({"b": [True, None], "a": 1}) == f"sha256:{expected}"
    assert digest({"a": 1, "b": [True, None]}) == digest({"b": [True, None], "a": 1})
    assert digest({"approved": True}) != digest({"approved": False})


def test_a_raised_interrupt_is_open_with_everything_the_run_said() -> None:
    [entry] = audit([started("r1", 10), interrupted("r1", 20, APPROVE)], [])
    assert entry.status == "open"
    assert entry.wire() == {
        "interruptId": "i1", "status": "open", "runId": "r1", "agent": "approval",
        "raisedAt": 20, "reason": "approval", "message": "Send the email?",
        "toolCallId": "call-1", "responseSchema": {"type": "object"},
        "expiresAt": "2026-12-03T00:00:00Z"}


def test_the_event_timestamp_is_preferred_to_the_record_timestamp() -> None:
    record = interrupted("r1", 20, {"id": "i1"})
    record.value["timestamp"] = 17
    [entry] = audit([record], [])
    assert entry.raised_at_ms == 17
    assert entry.wire() == {"interruptId": "i1", "status": "open", "runId": "r1",
                            "agent": "approval", "raisedAt": 17}


def test_a_resolve_names_who_answered_when_and_the_payload_digest() -> None:
    events = [interrupted("r1", 20, APPROVE),
              started("r2", 30, answered("i1", "resolved", "tenant-a", {"approved": True}))]
    [entry] = audit(events, [admitted("r2", principal="tenant-a")])
    assert entry.status == "resolved"
    assert entry.wire()["answer"] == {
        "status": "resolved", "runId": "r2", "by": "tenant-a",
        "at": DECIDED_MS, "digest": digest({"approved": True})}


def test_without_its_decision_the_answer_is_timed_by_the_run_start() -> None:
    events = [interrupted("r1", 20, APPROVE),
              started("r2", 30, answered("i1", "cancelled", "tenant-a"))]
    [entry] = audit(events, [])
    assert entry.status == "cancelled"
    assert entry.wire()["answer"] == {"status": "cancelled", "runId": "r2", "by": "tenant-a",
                                      "at": 30}


def test_the_decisions_principal_is_used_when_the_entry_names_none() -> None:
    events = [interrupted("r1", 20, APPROVE), started("r2", 30, answered("i1", "resolved",
                                                                           None, 1))]
    [entry] = audit(events, [admitted("r2", principal="tenant-b")])
    assert entry.answer is not None
    assert entry.answer.by == "tenant-b"
    assert entry.answer.digest == digest(1)
    [named] = audit(events, [admitted("r2", principal="tenant-b", key_name="bob")])
    assert named.answer is not None
    assert named.answer.by == "tenant-b#bob"


def test_a_named_key_answering_is_recorded_as_tenant_and_name() -> None:
    events = [interrupted("r1", 20, APPROVE),
              started("r2", 30, answered("i1", "resolved", "tenant-a#alice", True))]
    [entry] = audit(events, [admitted("r2", principal="tenant-a", key_name="alice")])
    assert entry.wire()["answer"]["by"] == "tenant-a#alice"


def test_a_rejected_decision_for_the_run_is_not_its_admission() -> None:
    rejected = decision({"requestId": "x", "runId": "r2", "verdict": "rejected",
                         "decidedAt": "2020-01-01T00:00:00+00:00", "principal": "mallory"})
    events = [interrupted("r1", 20, APPROVE), started("r2", 30, answered("i1", "resolved",
                                                                           None, 1))]
    [entry] = audit(events, [rejected])
    assert entry.answer is not None
    assert (entry.answer.by, entry.answer.at_ms) == (None, 30)


def test_the_expiry_policy_cancelling_reads_as_expired() -> None:
    events = [interrupted("r1", 20, APPROVE, {"id": "i2", "reason": "input"}),
              started("r2", 30, answered("i1", "cancelled", "policy:expiry"),
                      answered("i2", "cancelled", "policy:expiry"))]
    entries = audit(events, [admitted("r2", policy="expiry")])
    assert [(e.interrupt_id, e.status) for e in entries] == [("i1", "expired"),
                                                              ("i2", "expired")]
    assert entries[0].wire()["answer"]["policy"] == "expiry"
    assert entries[0].wire()["answer"]["by"] == "policy:expiry"


def test_the_expiry_answerer_alone_also_reads_as_expired() -> None:
    events = [interrupted("r1", 20, APPROVE),
              started("r2", 30, answered("i1", "cancelled", "policy:expiry"))]
    assert audit(events, [])[0].status == "expired"


def test_entries_follow_the_order_raised_across_runs() -> None:
    events = [interrupted("r1", 20, {"id": "a"}, {"id": "b"}),
              started("r2", 30, answered("a", "resolved", "p", 1),
                      answered("b", "resolved", "p", 2)),
              interrupted("r2", 40, {"id": "c"})]
    entries = audit(events, [])
    assert [(e.interrupt_id, e.run_id, e.status) for e in entries] == [
        ("a", "r1", "resolved"), ("b", "r1", "resolved"), ("c", "r2", "open")]


def test_an_id_raised_again_gets_its_own_entry_and_its_own_answer() -> None:
    events = [interrupted("r1", 20, {"id": "i1"}),
              started("r2", 30, answered("i1", "resolved", "p", "first")),
              interrupted("r2", 40, {"id": "i1"}),
              started("r3", 50, answered("i1", "cancelled", "q"))]
    first, second = audit(events, [])
    assert (first.run_id, first.answer and first.answer.run_id) == ("r1", "r2")
    assert (second.run_id, second.answer and second.answer.run_id) == ("r2", "r3")
    assert second.status == "cancelled"


def test_an_answer_to_nothing_raised_is_ignored() -> None:
    events = [started("r1", 10, answered("ghost", "resolved", "p", 1)),
              interrupted("r1", 20, {"id": "i1"})]
    [entry] = audit(events, [])
    assert (entry.interrupt_id, entry.status) == ("i1", "open")


def test_other_events_and_malformed_records_are_skipped() -> None:
    events = [event({"type": "TEXT_MESSAGE_CONTENT", "delta": "x"}, 5),
              event({"type": "RUN_FINISHED", "runId": "r0", "outcome": {"type": "success"}}, 6),
              event({"type": "RUN_FINISHED", "runId": "r0", "outcome": "interrupt"}, 7),
              interrupted("r1", 8, {"reason": "no id"}, "not an object", {"id": "ok"}),
              event({"type": "RUN_STARTED", "runId": "r2"}, 9),
              event({"type": "RUN_STARTED", "runId": "r2", "input": {"resume": [
                  "junk", {"status": "resolved"}]}}, 10),
              OpsRecord("t.events", "events", 0, 99, 11, "th-1", {}, "not json")]
    [entry] = audit(events, [decision({"verdict": "admitted"}), decision({})])
    assert (entry.interrupt_id, entry.status, entry.agent) == ("ok", "open", "approval")


def test_an_unparseable_decision_time_falls_back_to_the_run_start() -> None:
    events = [interrupted("r1", 20, {"id": "i1"}),
              started("r2", 30, answered("i1", "resolved", "p", 1))]
    [entry] = audit(events, [admitted("r2", at="yesterday")])
    assert entry.answer is not None
    assert entry.answer.at_ms == 30


def test_the_wire_form_is_json_serializable_and_camel_case() -> None:
    events = [interrupted("r1", 20, APPROVE),
              started("r2", 30, answered("i1", "resolved", "tenant-a", {"ok": True}))]
    body = orjson.loads(orjson.dumps([e.wire() for e in audit(events, [])]))
    assert all("_" not in key for key in body[0])
    assert all("_" not in key for key in body[0]["answer"])
