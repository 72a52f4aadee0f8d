"""A delegation's child thread is answered at its parent (``children``, step 4 of ``rules``).

The state keeps the ``parentRunId`` of the run admitted last when a delegation
made it (``policy="delegation"``; any other request clears it, a client's own
``parentRunId`` included); an interrupted child refuses a resume that resolves
anything unless the resume is itself a delegation's (``answer_at_parent``,
naming the parent thread), and admits one that only cancels. Every combination
of thread status, child or not, who sent the request (a client, a client naming
a ``parentRunId`` of its own, a delegation) and the shape of its resume list is
decided both on the child and on the same thread without a parent: they differ
exactly where the rule says, and only by that refusal.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from ag_ui.core import ResumeEntry
from gatekeeper_builders import (
    ENQUEUE,
    LENIENT,
    NOW,
    REJECT,
    cancel,
    interrupt,
    interrupted_by,
    request,
    resolve,
    started,
    succeeded,
)

from contracts import RunRequest, ThreadState
from contracts.records import parent_thread
from services.gatekeeper import children
from services.gatekeeper.rules import Policy, decide, on_boundary
from services.gatekeeper.thread import apply_boundary, fresh

pytestmark = pytest.mark.unit

PARENT = "t-top"
CHILD = f"{PARENT}/review-0123456789abcdef"
PARENT_RUN = "top-r1"


def delegated(request_id: str, run_id: str, parent_run_id: str | None, **kw: Any
              ) -> RunRequest:
    """A delegation's request (none without a parent run: a client's)."""
    return request(request_id, run_id, parent_run_id=parent_run_id,
                   policy="delegation" if parent_run_id is not None else None, **kw)


def child_running(parent_run_id: str | None = PARENT_RUN, thread_id: str = CHILD) -> ThreadState:
    outcome = decide(fresh(thread_id), delegated("q0", "c0", parent_run_id,
                                                 thread_id=thread_id), NOW, REJECT)
    assert outcome.decision.verdict == "admitted"
    return outcome.state


def child_interrupted(parent_run_id: str | None = PARENT_RUN, thread_id: str = CHILD
                      ) -> ThreadState:
    state, _ = on_boundary(child_running(parent_run_id, thread_id),
                           interrupted_by("c0", interrupt("sign-off"), interrupt("note")),
                           NOW, REJECT)
    assert state.status == "interrupted"
    return state


def child_idle() -> ThreadState:
    state, _ = on_boundary(child_running(), succeeded("c0"), NOW, REJECT)
    return state


def test_admission_records_the_parent_run_and_a_client_run_clears_it() -> None:
    running = child_running()
    assert running.parent_run_id == PARENT_RUN
    interrupted = child_interrupted()
    assert interrupted.parent_run_id == PARENT_RUN  # kept while it waits
    routed = decide(interrupted, delegated("q1", "c1", "top-r2", thread_id=CHILD,
                                           resume=resolve("sign-off", "note")), NOW, REJECT)
    assert routed.decision.verdict == "admitted"
    assert routed.state.parent_run_id == "top-r2"  # the parent's resumed run
    idle, _ = on_boundary(routed.state, succeeded("c1"), NOW, REJECT)
    again = decide(idle, request("q2", "c2", thread_id=CHILD), NOW, REJECT)
    assert again.decision.verdict == "admitted"
    assert again.state.parent_run_id is None


def test_a_clients_own_parent_run_id_makes_no_child_and_answers_none() -> None:
    """AG-UI lets a client say a run was spawned by another (``parentRunId``): that makes
    no thread a child whose inbox is elsewhere, and answers no child's interrupt (a probe
    got past the rule with a made-up one)."""
    spawned = decide(fresh("t-own"), request("q0", "r0", thread_id="t-own",
                                             parent_run_id="its-own-run"), NOW, REJECT)
    assert spawned.decision.verdict == "admitted"
    assert spawned.state.parent_run_id is None
    forged = decide(child_interrupted(), request("q1", "c1", thread_id=CHILD,
                                                 resume=resolve("sign-off", "note"),
                                                 parent_run_id="made-up"), NOW, REJECT)
    assert forged.decision.code == "answer_at_parent"
    assert forged.dispatch is None


def test_a_run_adopted_from_its_events_has_no_parent() -> None:
    idle = child_idle()
    assert idle.parent_run_id == PARENT_RUN
    adopted = apply_boundary(idle, started("foreign-run"))
    assert adopted.status == "running"
    assert adopted.parent_run_id is None


def test_answering_a_child_directly_is_refused_and_names_its_parent() -> None:
    state = child_interrupted()
    outcome = decide(state, request("q1", "c1", thread_id=CHILD,
                                    resume=resolve("sign-off", "note")), NOW, REJECT)
    assert outcome.decision.verdict == "rejected"
    assert outcome.decision.code == "answer_at_parent"
    assert f"{PARENT!r}" in outcome.decision.message
    assert outcome.decision.interrupt_ids == ["sign-off", "note"]
    assert outcome.dispatch is None
    assert outcome.state.status == "interrupted"
    assert outcome.state.open_interrupts == state.open_interrupts
    assert outcome.state.parent_run_id == PARENT_RUN


def test_one_resolved_entry_among_cancels_is_refused_and_named_alone() -> None:
    outcome = decide(child_interrupted(), request(
        "q1", "c1", thread_id=CHILD, resume=[*cancel("note"), *resolve("sign-off")]),
        NOW, REJECT)
    assert outcome.decision.code == "answer_at_parent"
    assert outcome.decision.interrupt_ids == ["sign-off"]


def test_cancelling_every_open_interrupt_of_a_child_is_the_way_out() -> None:
    outcome = decide(child_interrupted(), request(
        "q1", "c1", thread_id=CHILD, resume=cancel("sign-off", "note")), NOW, REJECT)
    assert outcome.decision.verdict == "admitted"
    assert outcome.dispatch is not None
    assert outcome.state.parent_run_id is None  # the operator's run is no child run


def test_a_refused_answer_is_remembered_and_replayed_for_its_request_id() -> None:
    refused = decide(child_interrupted(), request("q1", "c1", thread_id=CHILD,
                                                  resume=resolve("sign-off", "note")),
                     NOW, REJECT)
    again = decide(refused.state, request("q1", "c1", thread_id=CHILD,
                                          resume=resolve("sign-off", "note")), NOW, REJECT)
    assert again.decision.code == "answer_at_parent"
    assert again.dispatch is None


@pytest.mark.parametrize(("thread_id", "parent"), [
    ("t/a-1", "t"), ("t/a-1/b-2", "t/a-1"), ("a/b/c/d-3", "a/b/c"), ("top", "")])
def test_the_parent_thread_is_the_id_up_to_its_last_separator(thread_id: str,
                                                               parent: str) -> None:
    assert parent_thread(thread_id) == parent


RESUMES: dict[str, list[ResumeEntry] | None] = {
    "none": None,
    "empty": [],
    "all resolved": resolve("sign-off", "note"),
    "one resolved": [*resolve("sign-off"), *cancel("note")],
    "all cancelled": cancel("sign-off", "note"),
    "partly cancelled": cancel("note"),
    "partly resolved": resolve("sign-off"),
    "unknown resolved": resolve("zz"),
    "twice resolved": resolve("sign-off", "sign-off", "note"),
}
STATES = {
    "running": child_running,
    "interrupted": child_interrupted,
    "idle": child_idle,
}
POLICIES = {"reject": REJECT, "enqueue": ENQUEUE, "lenient": LENIENT}


def _orphaned(state: ThreadState) -> ThreadState:
    """The same thread as if its runs had been a client's."""
    return state.model_copy(update={"parent_run_id": None})


SENDERS: dict[str, dict[str, Any]] = {
    "client": {},
    "client naming a parent run": {"parent_run_id": "its-own"},
    "delegation": {"parent_run_id": "top-r2", "policy": "delegation"},
}


@pytest.mark.parametrize(("status", "resume", "sender", "policy"), list(itertools.product(
    STATES, RESUMES, SENDERS, POLICIES)))
def test_the_child_rule_changes_exactly_the_answers_sent_past_the_parent(
        status: str, resume: str, sender: str, policy: str) -> None:
    state = STATES[status]()
    entries = RESUMES[resume]
    judged: Policy = POLICIES[policy]
    sent = SENDERS[sender]
    on_child = decide(state, request("q1", "c1", thread_id=CHILD, resume=entries, **sent),
                      NOW, judged)
    on_plain = decide(_orphaned(state), request("q1", "c1", thread_id=CHILD, resume=entries,
                                                **sent), NOW, judged)
    answers = any(e.status == "resolved" for e in entries or ())
    if status == "interrupted" and sender != "delegation" and answers:
        assert on_child.decision.code == "answer_at_parent"
        assert on_child.dispatch is None
        assert on_child.state.open_interrupts == state.open_interrupts
        assert children.refusal(state, request("q", "r", thread_id=CHILD, resume=entries,
                                               **sent)) is not None
        return
    assert on_child.decision.model_copy(update={"message": ""}) == \
        on_plain.decision.model_copy(update={"message": ""})
    assert on_child.decision.message == on_plain.decision.message
    assert (on_child.dispatch is None) == (on_plain.dispatch is None)
    if on_child.dispatch is not None:
        assert on_child.state.parent_run_id == (
            sent["parent_run_id"] if sender == "delegation" else None)
        assert on_child.state == on_plain.state
    else:
        assert on_child.state.parent_run_id == state.parent_run_id


def test_a_thread_that_was_never_a_child_is_never_refused_so() -> None:
    for entries in RESUMES.values():
        state = child_interrupted(parent_run_id=None, thread_id="t-top/looks-like-a-child")
        assert children.refusal(state, request("q", "r", thread_id=state.thread_id,
                                               resume=entries)) is None
