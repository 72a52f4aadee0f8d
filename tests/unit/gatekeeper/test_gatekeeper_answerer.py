"""Who answered: the request's principal on its decision and in every dispatched resume entry."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from ag_ui.core import ResumeEntry
from gatekeeper_builders import (
    NOW,
    REJECT,
    cancel,
    expiring,
    interrupt,
    interrupted,
    request,
    resolve,
)

from contracts import Decision, Dispatch, RunRequest, decode, encode
from contracts.records import EXPIRY_ANSWERER, PRINCIPAL_KEY
from services.gatekeeper import wire
from services.gatekeeper.expiry_policy import expiry_request
from services.gatekeeper.rules import decide

pytestmark = pytest.mark.unit


def by(principal: str | None, *entries: ResumeEntry, **kw: object) -> RunRequest:
    return request("q2", "r2", resume=list(entries)).model_copy(
        update={"principal": principal, **kw})


def test_an_admitted_resume_names_its_principal_on_the_decision_and_every_entry() -> None:
    state = interrupted(interrupt("a"), interrupt("b"))
    outcome = decide(state, by("alice", *resolve("a"), *cancel("b")), NOW, REJECT)
    assert outcome.decision.verdict == "admitted"
    assert outcome.decision.principal == "alice"
    assert outcome.decision.policy is None
    assert outcome.dispatch is not None
    entries = outcome.dispatch.input.resume or []
    assert [(e.interrupt_id, (e.metadata or {})[PRINCIPAL_KEY]) for e in entries] == [
        ("a", "alice"), ("b", "alice")]
    assert entries[0].payload == {"approved": True}


def test_a_client_cannot_claim_another_answerer_and_keeps_its_other_metadata() -> None:
    forged = ResumeEntry(interrupt_id="a", status="resolved", payload={"approved": True},
                         metadata={PRINCIPAL_KEY: "the-boss", "note": "hi"})
    outcome = decide(interrupted(interrupt("a")), by("mallory", forged), NOW, REJECT)
    assert outcome.dispatch is not None
    assert (outcome.dispatch.input.resume or [])[0].metadata == {
        "note": "hi", PRINCIPAL_KEY: "mallory"}
    unnamed = decide(interrupted(interrupt("a")), by(None, forged), NOW, REJECT)
    assert unnamed.dispatch is not None
    assert (unnamed.dispatch.input.resume or [])[0].metadata == {"note": "hi"}


def test_the_expiry_policy_answers_as_itself_and_says_so() -> None:
    state = interrupted(expiring("a", -timedelta(seconds=1))).model_copy(
        update={"principal": "alice"})
    outcome = decide(state, expiry_request(state, {"messages": []}, NOW), NOW, REJECT)
    assert (outcome.decision.principal, outcome.decision.policy) == ("alice", "expiry")
    assert outcome.dispatch is not None
    assert outcome.dispatch.policy == "expiry"
    assert (outcome.dispatch.input.resume or [])[0].metadata == {PRINCIPAL_KEY: EXPIRY_ANSWERER}


def test_rejections_and_replays_name_the_principal_too() -> None:
    state = interrupted(interrupt("a"))
    rejected = decide(state, by("bob", *resolve("zzz")), NOW, REJECT)
    assert (rejected.decision.code, rejected.decision.principal) == ("unknown_interrupt", "bob")
    first = decide(state, by("alice", *resolve("a")), NOW, REJECT)
    again = decide(first.state, by("alice", *resolve("a")), NOW, REJECT)
    assert again.dispatch is None
    assert again.decision == first.decision.model_copy(update={"replayed": True})


def test_the_fast_encoders_write_what_the_contract_writes() -> None:
    state = interrupted(expiring("a", -timedelta(seconds=1)))
    request_ = expiry_request(state, {"messages": []}, NOW)
    outcome = decide(state, request_, NOW, REJECT)
    assert outcome.decision.verdict == "admitted"
    assert wire.decision(outcome.decision) == encode(outcome.decision)
    assert decode(Decision, wire.decision(outcome.decision)) == outcome.decision
    assert wire.state(outcome.state) == encode(outcome.state)
    assert outcome.dispatch is not None
    raw = orjson.loads(encode(request_))
    assert decode(Dispatch, wire.dispatch(outcome.dispatch, raw)) == outcome.dispatch
    doc = orjson.loads(wire.dispatch(outcome.dispatch, raw))
    assert doc["input"]["resume"][0]["metadata"] == {PRINCIPAL_KEY: EXPIRY_ANSWERER}
    assert doc["policy"] == "expiry"


def test_two_keys_of_one_tenant_share_its_thread_but_answer_each_as_itself() -> None:
    state = interrupted(interrupt("a")).model_copy(update={"principal": "tenant-a"})
    outcome = decide(state, by("tenant-a", *resolve("a"), key_name="bob"), NOW, REJECT)
    assert outcome.decision.verdict == "admitted", outcome.decision.message
    assert (outcome.decision.principal, outcome.decision.key_name) == ("tenant-a", "bob")
    assert outcome.state.principal == "tenant-a"  # ownership stays the tenant's
    assert outcome.state.recent_decisions[-1].key_name == "bob"
    assert outcome.dispatch is not None
    assert (outcome.dispatch.principal, outcome.dispatch.key_name) == ("tenant-a", "bob")
    forged = ResumeEntry(interrupt_id="a", status="resolved", payload={"approved": True},
                         metadata={PRINCIPAL_KEY: "tenant-a#alice"})
    claimed = decide(state, by("tenant-a", forged, key_name="bob"), NOW, REJECT)
    assert claimed.dispatch is not None
    assert (claimed.dispatch.input.resume or [])[0].metadata == {PRINCIPAL_KEY: "tenant-a#bob"}
    assert (outcome.dispatch.input.resume or [])[0].metadata == {PRINCIPAL_KEY: "tenant-a#bob"}
    again = decide(outcome.state, by("tenant-a", *resolve("a"), key_name="bob"), NOW, REJECT)
    assert again.decision == outcome.decision.model_copy(update={"replayed": True})
    assert wire.decision(outcome.decision) == encode(outcome.decision)
    assert b'"keyName":"bob"' in wire.decision(outcome.decision)
    assert wire.state(outcome.state) == encode(outcome.state)
    raw = orjson.loads(encode(by("tenant-a", *resolve("a"), key_name="bob")))
    assert decode(Dispatch, wire.dispatch(outcome.dispatch, raw)) == outcome.dispatch
