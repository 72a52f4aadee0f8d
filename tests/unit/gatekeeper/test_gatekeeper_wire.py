"""The gatekeeper's fast encoders write exactly what ``contracts.encode`` writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from ag_ui.core import Interrupt, ResumeEntry
from gatekeeper_builders import (
    AGENT,
    ENQUEUE,
    LENIENT,
    NOW,
    REJECT,
    cancel,
    interrupt,
    interrupted,
    request,
    resolve,
    running,
)
from hypothesis import given
from hypothesis import strategies as st

from contracts import Decision, Dispatch, ThreadState, decode, encode
from services.gatekeeper import wire
from services.gatekeeper.rules import Policy, decide

pytestmark = pytest.mark.unit

CLOCKS = st.sampled_from(
    [
        NOW,
        NOW.replace(microsecond=0),
        NOW.replace(microsecond=7),
        datetime(2026, 3, 1, 13, 0, 0, 250_000, tzinfo=timezone(timedelta(hours=1))),
    ]
)


def _threads() -> list[ThreadState]:
    full = interrupted(
        Interrupt(
            id="a",
            reason="approve",
            message="ok?",
            tool_call_id="tc1",
            response_schema={"type": "object"},
            expires_at="2027-01-01T00:00:00Z",
            metadata={"k": [1, None]},
            subagent_run_id="sub1",
        ),
        interrupt("b"),
    )
    queued = decide(running("r0"), request("q9", "r9", resume=resolve("x")), NOW, ENQUEUE).state
    child = full.model_copy(update={"parent_run_id": "parent-r0"})  # a delegation's
    undated = full.model_copy(update={"open_interrupts": [  # written before openedAt
        o.model_copy(update={"opened_at": None}) for o in full.open_interrupts]})
    return [full, child, undated, queued, running("r0"), ThreadState(thread_id="bare")]


@given(
    state=st.sampled_from(_threads()),
    resume=st.sampled_from(
        [None, [], resolve("a", "b"), [*cancel("a"), *resolve("b")], resolve("a"), resolve("zz")]
    ),
    policy=st.sampled_from([REJECT, ENQUEUE, LENIENT]),
    now=CLOCKS,
    agent=st.sampled_from([AGENT, "approval"]),  # another agent: a handover
    parent=st.sampled_from([None, "parent-r1"]),  # a delegation's child run
)
def test_decisions_states_and_dispatches_encode_as_the_contract_does(
    state: ThreadState, resume: list[ResumeEntry] | None, policy: Policy, now: datetime,
    agent: str, parent: str | None,
) -> None:
    thread_id = state.thread_id
    asked = request("q-new", "r-new", thread_id=thread_id, resume=resume, agent=agent,
                    parent_run_id=parent)
    outcome = decide(state, asked, now, policy)
    assert wire.decision(outcome.decision) == encode(outcome.decision)
    assert wire.state(outcome.state) == encode(outcome.state)
    assert decode(Decision, wire.decision(outcome.decision)) == outcome.decision
    assert decode(ThreadState, wire.state(outcome.state)) == outcome.state
    again = decide(outcome.state, asked, now, policy).decision  # a replay, when remembered
    assert wire.decision(again) == encode(again)
    if outcome.dispatch is not None:
        raw = orjson.loads(encode(asked))
        fast = wire.dispatch(outcome.dispatch, raw)
        assert decode(Dispatch, fast) == outcome.dispatch
        assert wire.dispatch(outcome.dispatch, None) == encode(outcome.dispatch)


def test_a_dispatch_keeps_the_request_as_it_came_but_not_its_stray_envelope_fields() -> None:
    req = request("q1", "r1")
    raw = orjson.loads(encode(req))
    raw["input"]["futureField"] = {"kept": True}
    raw["warnings"] = ["forged"]
    raw["handover"] = {"schemaVersion": 1, "runId": "forged", "agent": "forged"}
    raw["decidedAt"] = "1999-01-01T00:00:00Z"
    outcome = decide(ThreadState(thread_id="t1"), req, NOW, REJECT)
    assert outcome.dispatch is not None
    doc = orjson.loads(wire.dispatch(outcome.dispatch, raw))
    assert doc["input"]["futureField"] == {"kept": True}
    assert "warnings" not in doc
    assert "handover" not in doc  # a request naming a run to wait for is not believed
    assert doc["decidedAt"] == "2026-03-01T12:00:00.250000Z"
    assert datetime.fromisoformat(doc["decidedAt"]) == NOW.astimezone(UTC)
