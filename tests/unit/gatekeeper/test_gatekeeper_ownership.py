"""Step 0 of the rule engine: a thread belongs to the principal of its first admitted run.

Another principal's request is rejected ``key_mismatch`` before any other
rule looks at the thread (no ``thread_busy``, no interrupt codes, no replayed
decision that would tell what the owner did), and the rejection leaves the
state untouched. A Hypothesis property drives random interleavings of three
principals (two tenants and the unattributed ``None``) and run boundaries,
under every policy: the owner, once set, never changes, and nothing is ever
dispatched for anyone else.
"""

from __future__ import annotations

import pytest
from gatekeeper_builders import (
    ENQUEUE,
    NOW,
    REJECT,
    failed,
    interrupt,
    interrupted_by,
    request,
    resolve,
    succeeded,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import RunRequest, ThreadState
from services.gatekeeper.rules import Outcome, Policy, decide, drain, on_boundary
from services.gatekeeper.thread import fresh

pytestmark = pytest.mark.unit


def by(principal: str | None, request_id: str = "q1", run_id: str = "r1",
       **kwargs: object) -> RunRequest:
    return request(request_id, run_id, **kwargs).model_copy(  # type: ignore[arg-type]
        update={"principal": principal})


def owned(principal: str | None = "tenant-a", run_id: str = "r0") -> ThreadState:
    """A thread whose run ``run_id`` by ``principal`` finished."""
    admitted = decide(fresh("t1"), by(principal, f"q-{run_id}", run_id), NOW, REJECT)
    assert admitted.decision.verdict == "admitted"
    state, _ = on_boundary(admitted.state, succeeded(run_id), NOW, REJECT)
    return state


def assert_hidden(outcome: Outcome, before: ThreadState) -> None:
    assert outcome.decision.verdict == "rejected"
    assert outcome.decision.code == "key_mismatch"
    assert "another principal" in outcome.decision.message
    assert outcome.decision.interrupt_ids is None
    assert outcome.dispatch is None
    assert outcome.state is before  # nothing written, nothing remembered


def test_the_first_admitted_run_makes_its_principal_the_owner() -> None:
    outcome = decide(fresh("t1"), by("tenant-a"), NOW, REJECT)
    assert outcome.decision.verdict == "admitted"
    assert outcome.state.principal == "tenant-a"
    assert outcome.dispatch is not None
    assert outcome.dispatch.principal == "tenant-a"


def test_a_rejection_on_a_new_thread_claims_nothing() -> None:
    rejected = decide(fresh("t1"), by("tenant-b", resume=resolve("i1")), NOW, REJECT)
    assert rejected.decision.code == "unknown_interrupt"
    assert rejected.state.principal is None
    admitted = decide(rejected.state, by("tenant-a", "q2", "r2"), NOW, REJECT)
    assert admitted.decision.verdict == "admitted"
    assert admitted.state.principal == "tenant-a"


@pytest.mark.parametrize("intruder", ["tenant-b", None, "TENANT-A", "tenant-a "])
def test_another_principal_gets_key_mismatch_on_an_idle_thread(intruder: str | None) -> None:
    state = owned()
    assert_hidden(decide(state, by(intruder, "q2", "r2"), NOW, REJECT), state)


def test_another_principal_learns_nothing_from_a_running_thread() -> None:
    running = decide(owned(), by("tenant-a", "q2", "r2"), NOW, REJECT).state
    assert running.status == "running"
    for policy in (REJECT, ENQUEUE):
        assert_hidden(decide(running, by("tenant-b", "q3", "r3"), NOW, policy), running)
        # even reusing the running run's id: no duplicate_run_id either
        assert_hidden(decide(running, by("tenant-b", "q3", "r2"), NOW, policy), running)


def test_another_principal_cannot_answer_the_owners_interrupts() -> None:
    running = decide(owned(), by("tenant-a", "q2", "r2"), NOW, REJECT).state
    interrupted, _ = on_boundary(running, interrupted_by("r2", interrupt("i1")), NOW, REJECT)
    stolen = by("tenant-b", "q3", "r3", resume=resolve("i1"))
    assert_hidden(decide(interrupted, stolen, NOW, REJECT), interrupted)
    mine = decide(interrupted, by("tenant-a", "q4", "r4", resume=resolve("i1")), NOW, REJECT)
    assert mine.decision.verdict == "admitted"


def test_a_replayed_request_id_from_another_principal_is_not_answered_with_the_owners() -> None:
    state = owned(run_id="r0")
    assert_hidden(decide(state, by("tenant-b", "q-r0", "r0"), NOW, REJECT), state)
    again = decide(state, by("tenant-a", "q-r0", "r0"), NOW, REJECT)
    assert again.decision.verdict == "admitted"  # the owner's retry: the same decision
    assert again.dispatch is None


def test_an_unowned_thread_is_claimed_by_its_next_admitted_run() -> None:
    state = owned(principal=None)
    assert state.principal is None
    assert decide(state, by(None, "q2", "r2"), NOW, REJECT).state.principal is None
    claimed = decide(state, by("tenant-a", "q3", "r3"), NOW, REJECT)
    assert claimed.decision.verdict == "admitted"
    assert claimed.state.principal == "tenant-a"


def test_queued_requests_of_another_principal_are_refused_when_drained() -> None:
    running = decide(owned(principal=None), by(None, "q1", "r1"), NOW, ENQUEUE).state
    queued_a = decide(running, by("tenant-a", "qa", "ra"), NOW, ENQUEUE)
    queued_b = decide(queued_a.state, by("tenant-b", "qb", "rb"), NOW, ENQUEUE)
    assert [queued_a.decision.verdict, queued_b.decision.verdict] == ["queued", "queued"]
    state, outcomes = on_boundary(queued_b.state, succeeded("r1"), NOW, ENQUEUE)
    assert [(o.decision.request_id, o.decision.verdict) for o in outcomes] == [
        ("qa", "admitted")]
    state, outcomes = on_boundary(state, succeeded("ra"), NOW, ENQUEUE)
    assert [(o.decision.request_id, o.decision.code) for o in outcomes] == [
        ("qb", "key_mismatch")]
    assert state.principal == "tenant-a"
    assert state.queued == []
    assert drain(state, NOW, ENQUEUE) == (state, [])


PRINCIPALS = st.sampled_from(["tenant-a", "tenant-b", None])
POLICIES = st.sampled_from([REJECT, ENQUEUE, Policy(unknown_entry="lenient")])


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, str | None, int]]:
    """Requests (kind ``q``, a principal, a run number) and run closes (``s``, ``e``)."""
    kinds = st.sampled_from(["q", "q", "q", "s", "e"])
    return draw(st.lists(st.tuples(kinds, PRINCIPALS, st.integers(0, 5)), max_size=25))


@given(script=steps(), policy=POLICIES)
@settings(max_examples=300)
def test_the_owner_never_changes_and_nothing_is_dispatched_for_another(
        script: list[tuple[str, str | None, int]], policy: Policy) -> None:
    state = fresh("t1")
    owner: str | None = None
    dispatched: list[str | None] = []
    for n, (kind, principal, run) in enumerate(script):
        if kind == "q":
            outcome = decide(state, by(principal, f"q{n}", f"r{run}"), NOW, policy)
            outcomes = [outcome]
            state = outcome.state
        else:
            current = state.run_id or "r0"
            boundary = succeeded(current) if kind == "s" else failed(current)
            state, outcomes = on_boundary(state, boundary, NOW, policy)
        for outcome in outcomes:
            if outcome.dispatch is not None:
                dispatched.append(outcome.dispatch.principal)
                if owner is None:
                    owner = outcome.dispatch.principal
            if outcome.decision.code == "key_mismatch":
                assert owner is not None
        if owner is not None:
            assert state.principal == owner
    first_owned = next((i for i, p in enumerate(dispatched) if p is not None), len(dispatched))
    assert all(p == dispatched[first_owned] for p in dispatched[first_owned:])
