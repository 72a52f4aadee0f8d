"""What a thread's change notifies: every pair of small states, against set arithmetic."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Literal

import pytest
from notifier_builders import SCOPE, T0, admitted, interrupt, interrupted, ms, state

from contracts import RememberedDecision, ThreadState
from services.notifier.changes import delivery_id, expire, seen_of, transition

pytestmark = pytest.mark.unit

A, B, C = interrupt("a"), interrupt("b"), interrupt("c")
STATES: dict[str, ThreadState | None] = {
    "absent": None,
    "idle": state("idle"),
    "running": state("running"),
    "r1:a": interrupted(("r1", A)),
    "r1:a,b": interrupted(("r1", A), ("r1", B)),
    "r1:b": interrupted(("r1", B)),
    "r2:c": interrupted(("r2", C)),
    "r1:a+r2:c": interrupted(("r1", A), ("r2", C)),
    # a delegation's child: its interrupts are carried up and notified on its parent
    "child r1:a": interrupted(("r1", A)).model_copy(update={"parent_run_id": "top-r1"}),
    "child r2:c": interrupted(("r2", C)).model_copy(update={"parent_run_id": "top-r1"}),
}


def _open(s: ThreadState | None) -> set[tuple[str, str]]:
    if s is None or s.status != "interrupted" or s.parent_run_id is not None:
        return set()
    return {(o.run_id, o.interrupt.id) for o in s.open_interrupts}


def _by_run(keys: set[tuple[str, str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for run, i in keys:
        out.setdefault(run, set()).add(i)
    return out


@pytest.mark.parametrize(("was", "now"), list(itertools.product(STATES, STATES)))
def test_every_pair_of_states(was: str, now: str) -> None:
    before, after = STATES[was], STATES[now]
    seen, events = transition(SCOPE, "t1", seen_of(before), after, T0)
    if after is None:
        assert (seen, events) == (None, []), "a tombstone forgets the thread, notifying nothing"
        return
    gone, fresh = _open(before) - _open(after), _open(after) - _open(before)
    answered = [e for e in events if e.kind == "answered"]
    raised = [e for e in events if e.kind == "interrupted"]
    assert len(answered) + len(raised) == len(events)
    assert events == answered + raised, "answers are told before new interrupts"
    assert {e.run_id: set(e.interrupt_ids) for e in answered} == _by_run(gone)
    assert {e.run_id: set(e.interrupt_ids) for e in raised} == _by_run(fresh)
    for e in raised:
        assert [i.id for i in e.interrupts or []] == e.interrupt_ids
        assert all(i.message == f"approve {i.id}?" for i in e.interrupts or []), "in full"
    for e in answered:
        assert e.interrupts is None
    for e in events:
        assert (e.thread_id, e.agent, e.principal, e.at) == ("t1", "approval", "acme", T0)
        assert e.delivery_id == delivery_id(SCOPE, e.kind, "t1", e.run_id,
                                            [(i, ms(T0)) for i in e.interrupt_ids])
    assert (seen is None) == (not _open(after)), "only threads with open interrupts are kept"
    if seen is not None:
        assert {(w.run_id, w.interrupt_id) for w in seen.waiting} == _open(after)


def test_answered_carries_the_admitting_decision() -> None:
    earlier = admitted("q0", "r0", "z")
    resume = admitted("q2", "r2", "a", "b", at=T0 + timedelta(seconds=3))
    rejected = RememberedDecision(request_id="q3", run_id="r3", verdict="rejected",
                                  code="thread_busy", message="busy", decided_at=T0)
    after = state("running", decisions=[earlier, resume, rejected])
    _, events = transition(SCOPE, "t1", seen_of(interrupted(("r1", A), ("r1", B))), after, T0)
    (event,) = events
    assert event.decision is not None
    assert (event.decision.request_id, event.decision.run_id) == ("q2", "r2")
    assert event.decision.decided_at == T0 + timedelta(seconds=3)
    assert event.answered_by is None  # the decision names no principal


@pytest.mark.parametrize(
    ("principal", "key_name", "policy", "who"),
    [("acme", "alice", None, "acme#alice"), ("acme", "bob", None, "acme#bob"),
     ("acme", None, None, "acme"), ("acme", None, "expiry", "policy:expiry")],
)
def test_answered_names_who_answered_tenant_and_key(
        principal: str, key_name: str | None, policy: Literal["expiry"] | None,
        who: str) -> None:
    resume = admitted("q2", "r2", "a").model_copy(
        update={"principal": principal, "key_name": key_name, "policy": policy})
    after = state("running", decisions=[resume])
    _, (event,) = transition(SCOPE, "t1", seen_of(interrupted(("r1", A))), after, T0)
    assert (event.principal, event.answered_by) == ("acme", who)
    assert event.model_dump(by_alias=True)["answeredBy"] == who


def test_answered_without_a_decision_naming_the_ids_has_none() -> None:
    after = state("idle", decisions=[admitted("q9", "r9", "other")])
    _, (event,) = transition(SCOPE, "t1", seen_of(interrupted(("r1", A))), after, T0)
    assert event.decision is None
    assert "decision" not in event.model_dump(by_alias=True), "omitted, never null"
    assert "answeredBy" not in event.model_dump(by_alias=True)


def test_the_state_time_is_the_event_time_and_the_record_time_the_fallback() -> None:
    later = T0 + timedelta(minutes=5)
    _, (event,) = transition(SCOPE, "t1", None, interrupted(("r1", A), updated_at=later), T0)
    assert event.at == later
    bare = interrupted(("r1", A)).model_copy(update={"updated_at": None})
    _, (event,) = transition(SCOPE, "t1", None, bare, later)
    assert event.at == later


def test_delivery_ids_name_the_notification_not_the_order_of_ids() -> None:
    a, b = ("a", 1), ("b", 1)
    one = delivery_id(SCOPE, "answered", "t1", "r1", [a, b])
    assert one == delivery_id(SCOPE, "answered", "t1", "r1", [b, a])
    others = {delivery_id(SCOPE, "expired", "t1", "r1", [a, b]),
              delivery_id("other.threads", "answered", "t1", "r1", [a, b]),
              delivery_id(SCOPE, "answered", "t2", "r1", [a, b]),
              delivery_id(SCOPE, "answered", "t1", "r2", [a, b]),
              delivery_id(SCOPE, "answered", "t1", "r1", [a]),
              delivery_id(SCOPE, "answered", "t1", "r1", [a, ("b", 2)])}
    assert one not in others
    assert len(others) == 6


def test_expire_marks_each_interrupt_once_grouped_by_run_and_instant() -> None:
    at = "2026-12-02T01:00:10.000Z"
    later = "2026-12-02T01:00:20Z"
    s = interrupted(("r1", interrupt("a", at)), ("r1", interrupt("b", at)),
                    ("r1", interrupt("c", later)), ("r1", interrupt("d")),
                    ("r1", interrupt("e", "not a date")))
    seen = seen_of(s)
    assert seen is not None
    seen, none_yet = expire(SCOPE, "t1", seen, ms(T0 + timedelta(seconds=10)) - 1)
    assert none_yet == []
    seen, first = expire(SCOPE, "t1", seen, ms(T0 + timedelta(seconds=10)))
    assert [(e.kind, e.interrupt_ids, e.at) for e in first] == [
        ("expired", ["a", "b"], T0 + timedelta(seconds=10))], "at the instant itself"
    seen, again = expire(SCOPE, "t1", seen, ms(T0 + timedelta(days=1000)))
    assert [e.interrupt_ids for e in again] == [["c"]], "a, b once; d and e never expire"
    assert expire(SCOPE, "t1", seen, ms(T0 + timedelta(days=2000)))[1] == []


def test_expired_marks_survive_a_change_that_keeps_the_interrupt() -> None:
    at = "2026-12-02T01:00:10Z"
    s = interrupted(("r1", interrupt("a", at)))
    seen = seen_of(s)
    assert seen is not None
    seen, _ = expire(SCOPE, "t1", seen, ms(T0 + timedelta(seconds=11)))
    rejected = s.model_copy(update={"updated_at": T0 + timedelta(seconds=12)})
    kept, events = transition(SCOPE, "t1", seen, rejected, T0)
    assert events == []
    assert kept is not None
    assert expire(SCOPE, "t1", kept, ms(T0 + timedelta(seconds=13)))[1] == []
