"""The decision table: every rejection code, every policy, every expiry edge.

Each row is a thread, a request and a policy, and the verdict, code and
interrupt ids the gatekeeper must answer with. Rows that admit also check
the dispatch and that the thread is running the new run at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from gatekeeper_builders import (
    ENQUEUE,
    LENIENT,
    NOW,
    REJECT,
    cancel,
    entry,
    expiring,
    failed,
    idle_after,
    interrupt,
    interrupted,
    interrupted_by,
    request,
    resolve,
    running,
    succeeded,
)

from contracts import Handover, RejectionCode, RunRequest, ThreadState, Verdict
from services.gatekeeper.rules import Outcome, Policy, decide, drain, on_boundary
from services.gatekeeper.thread import fresh

pytestmark = pytest.mark.unit

MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Row:
    name: str
    state: ThreadState
    request: RunRequest
    verdict: Verdict
    code: RejectionCode | None = None
    interrupt_ids: tuple[str, ...] = ()
    policy: Policy = REJECT
    warns: bool = False


TWO_OPEN = interrupted(interrupt("a"), interrupt("b"))
NEW = "r-new"

TABLE = [
    # idle threads
    Row("idle, plain run", fresh("t1"), request(run_id=NEW), "admitted"),
    Row("idle after a run, plain run", idle_after("r0"), request(run_id=NEW), "admitted"),
    Row("idle, empty resume list", fresh("t1"), request(run_id=NEW, resume=[]), "admitted"),
    Row(
        "idle, resume entries, strict",
        idle_after("r0"),
        request(run_id=NEW, resume=resolve("z")),
        "rejected",
        "unknown_interrupt",
        ("z",),
    ),
    Row(
        "idle, resume entries, lenient",
        idle_after("r0"),
        request(run_id=NEW, resume=[*resolve("z"), *cancel("y")]),
        "admitted",
        None,
        ("z", "y"),
        LENIENT,
        warns=True,
    ),
    # run ids
    Row(
        "runId of the running run",
        running("r0"),
        request(run_id="r0"),
        "rejected",
        "duplicate_run_id",
    ),
    Row(
        "runId of an earlier run",
        idle_after("r0"),
        request(run_id="r0"),
        "rejected",
        "duplicate_run_id",
    ),
    Row(
        "runId of the interrupted run",
        TWO_OPEN,
        request(run_id="r0", resume=resolve("a", "b")),
        "rejected",
        "duplicate_run_id",
    ),
    Row(
        "duplicate runId before busy, enqueue",
        running("r0"),
        request(run_id="r0"),
        "rejected",
        "duplicate_run_id",
        policy=ENQUEUE,
    ),
    # busy
    Row("running, reject", running("r0"), request(run_id=NEW), "rejected", "thread_busy"),
    Row("running, enqueue", running("r0"), request(run_id=NEW), "queued", policy=ENQUEUE),
    Row(
        "running, resume entries, reject",
        running("r0"),
        request(run_id=NEW, resume=resolve("a")),
        "rejected",
        "thread_busy",
    ),
    # interrupted: coverage
    Row(
        "interrupted, no resume",
        TWO_OPEN,
        request(run_id=NEW),
        "rejected",
        "uncovered_interrupts",
        ("a", "b"),
    ),
    Row(
        "interrupted, empty resume",
        TWO_OPEN,
        request(run_id=NEW, resume=[]),
        "rejected",
        "uncovered_interrupts",
        ("a", "b"),
    ),
    Row(
        "interrupted, partial",
        TWO_OPEN,
        request(run_id=NEW, resume=resolve("b")),
        "rejected",
        "uncovered_interrupts",
        ("a",),
    ),
    Row(
        "interrupted, duplicate entry",
        TWO_OPEN,
        request(run_id=NEW, resume=[*resolve("a", "b"), *cancel("a")]),
        "rejected",
        "duplicate_entry",
        ("a",),
    ),
    Row(
        "duplicate before unknown",
        TWO_OPEN,
        request(run_id=NEW, resume=resolve("a", "a", "zz", "b")),
        "rejected",
        "duplicate_entry",
        ("a",),
    ),
    Row(
        "interrupted, unknown entry",
        TWO_OPEN,
        request(run_id=NEW, resume=resolve("a", "b", "z")),
        "rejected",
        "unknown_interrupt",
        ("z",),
    ),
    Row(
        "unknown before uncovered",
        TWO_OPEN,
        request(run_id=NEW, resume=resolve("z")),
        "rejected",
        "unknown_interrupt",
        ("z",),
    ),
    Row(
        "interrupted, unknown entry, lenient still rejects",
        TWO_OPEN,
        request(run_id=NEW, resume=resolve("a", "b", "z")),
        "rejected",
        "unknown_interrupt",
        ("z",),
        LENIENT,
    ),
    Row(
        "interrupted, all resolved",
        TWO_OPEN,
        request(run_id=NEW, resume=resolve("b", "a")),
        "admitted",
        None,
        ("a", "b"),
    ),
    Row(
        "interrupted, all cancelled",
        TWO_OPEN,
        request(run_id=NEW, resume=cancel("a", "b")),
        "admitted",
        None,
        ("a", "b"),
    ),
    Row(
        "interrupted, enqueue policy changes nothing",
        TWO_OPEN,
        request(run_id=NEW, resume=resolve("a")),
        "rejected",
        "uncovered_interrupts",
        ("b",),
        ENQUEUE,
    ),
    # expiry
    Row(
        "resolving an expired interrupt",
        interrupted(expiring("a", -timedelta(days=1))),
        request(run_id=NEW, resume=resolve("a")),
        "rejected",
        "interrupt_expired",
        ("a",),
    ),
    Row(
        "cancelling an expired interrupt",
        interrupted(expiring("a", -timedelta(days=1))),
        request(run_id=NEW, resume=cancel("a")),
        "admitted",
        None,
        ("a",),
    ),
    Row(
        "uncovered before expired",
        interrupted(expiring("a", -timedelta(days=1)), interrupt("b")),
        request(run_id=NEW, resume=resolve("a")),
        "rejected",
        "uncovered_interrupts",
        ("b",),
    ),
    Row(
        "only the resolved expired are named",
        interrupted(expiring("a", -MS), expiring("b", -MS), expiring("c", MS)),
        request(run_id=NEW, resume=[*cancel("a"), *resolve("b", "c")]),
        "rejected",
        "interrupt_expired",
        ("b",),
    ),
]

EXPIRED_AT_NOW = [
    ("the instant itself", "2026-03-01T12:00:00.250Z", True),
    ("one ms before", "2026-03-01T12:00:00.249Z", True),
    ("one ms after", "2026-03-01T12:00:00.251Z", False),
    ("an offset, same instant", "2026-03-01T13:00:00.250+01:00", True),
    ("an offset, later", "2026-03-01T07:00:01-05:00", False),
    ("compact offset", "2026-03-01T13:00:00.250+0100", True),
    ("sub-ms fraction cut to ms", "2026-03-01T12:00:00.2509Z", True),
    ("sub-ms fraction, next ms", "2026-03-01T12:00:00.2510001Z", False),
    ("no fraction", "2026-03-01T12:00:00Z", True),
    ("date only is midnight UTC", "2026-03-01", True),
    ("date only, tomorrow", "2026-03-02", False),
    ("no offset reads as UTC", "2026-03-01T12:00:00", True),
    ("space instead of T", "2026-03-01 12:00:01Z", False),
    ("RFC 2822 (toUTCString)", "Sun, 01 Mar 2026 11:59:59 GMT", True),
    ("RFC 2822, later", "Sun, 01 Mar 2026 12:00:01 GMT", False),
    ("month name", "March 1, 2026 12:00:00 UTC", True),
    ("toString() form", "Sun Mar 01 2026 13:00:00 GMT+0100 (Central European Standard Time)", True),
    ("unparseable word", "tomorrow", False),
    ("empty string", "", False),
    ("epoch millis as text", "1772366400250", False),
]


def _check(row: Row) -> None:
    outcome = decide(row.state, row.request, NOW, row.policy)
    d = outcome.decision
    assert (d.verdict, d.code) == (row.verdict, row.code), d.message
    assert tuple(d.interrupt_ids or ()) == row.interrupt_ids
    assert d.request_id == row.request.request_id
    assert (d.thread_id, d.run_id, d.agent) == ("t1", row.request.input.run_id, "scripted")
    assert d.decided_at == NOW
    assert d.message
    assert bool(d.warnings) == row.warns
    if row.verdict == "admitted":
        assert outcome.dispatch is not None
        assert outcome.dispatch.input == row.request.input
        assert outcome.dispatch.warnings == d.warnings
        assert outcome.dispatch.handover is None  # every row's thread stays with its agent
        assert outcome.state.status == "running"
        assert outcome.state.run_id == row.request.input.run_id
        assert outcome.state.open_interrupts == []
    else:
        assert outcome.dispatch is None
        assert outcome.state.status == row.state.status
        assert outcome.state.open_interrupts == row.state.open_interrupts
    assert outcome.state.recent_decisions[-1].request_id == row.request.request_id


@pytest.mark.parametrize("row", TABLE, ids=[r.name for r in TABLE])
def test_decision_table(row: Row) -> None:
    _check(row)


def test_the_table_covers_every_code_verdict_and_policy() -> None:
    codes = {r.code for r in TABLE}
    assert codes >= {
        "duplicate_run_id",
        "thread_busy",
        "duplicate_entry",
        "unknown_interrupt",
        "uncovered_interrupts",
        "interrupt_expired",
    }
    assert {r.verdict for r in TABLE} == {"admitted", "rejected", "queued"}
    assert {(r.policy.busy, r.policy.unknown_entry) for r in TABLE} == {
        ("reject", "strict"),
        ("enqueue", "strict"),
        ("reject", "lenient"),
    }


@pytest.mark.parametrize(
    ("text", "expired"),
    [(t, e) for _, t, e in EXPIRED_AT_NOW],
    ids=[name for name, _, _ in EXPIRED_AT_NOW],
)
def test_expiry_is_read_as_the_reference_client_reads_it(text: str, expired: bool) -> None:
    state = interrupted(interrupt("a", expires_at=text))
    resolving = decide(state, request(run_id=NEW, resume=resolve("a")), NOW, REJECT).decision
    assert resolving.code == ("interrupt_expired" if expired else None), resolving.message
    cancelling = decide(state, request(run_id=NEW, resume=cancel("a")), NOW, REJECT).decision
    assert cancelling.verdict == "admitted"


@pytest.mark.parametrize("text", ["tomorrow", "", "2026-13-45T99:99:99Z"])
def test_an_unparseable_expiry_never_expires_and_the_decision_warns(text: str) -> None:
    state = interrupted(interrupt("a", expires_at=text), interrupt("b"))
    admitted = decide(state, request(run_id=NEW, resume=resolve("a", "b")), NOW, REJECT)
    assert admitted.decision.verdict == "admitted"
    assert admitted.decision.warnings is not None
    assert "a" in admitted.decision.warnings[0]
    assert "never expires" in admitted.decision.warnings[0]
    assert admitted.dispatch is not None
    assert admitted.dispatch.warnings == admitted.decision.warnings
    rejected = decide(state, request(run_id=NEW, resume=resolve("a")), NOW, REJECT).decision
    assert rejected.code == "uncovered_interrupts"
    assert rejected.warnings


def test_a_dispatch_names_the_previous_run_when_another_agent_ran_it() -> None:
    """The other agent's workers wrote the thread's checkpoint last (``Handover``)."""
    after = Handover(run_id="r0", agent="scripted")
    moved = decide(idle_after("r0"), request(run_id=NEW, agent="approval"), NOW, REJECT)
    assert moved.dispatch is not None
    assert moved.dispatch.handover == after
    resumed = decide(interrupted(interrupt("a")), request(run_id=NEW, agent="approval",
                                                        resume=resolve("a")), NOW, REJECT)
    assert resumed.dispatch is not None
    assert resumed.dispatch.handover == after
    assert decide(fresh("t1"), request(run_id=NEW, agent="approval"), NOW,
                  REJECT).dispatch.handover is None  # type: ignore[union-attr]
    stays = decide(idle_after("r0"), request(run_id=NEW), NOW, REJECT).dispatch
    assert stays is not None
    assert stays.handover is None

    queued = decide(running("r0"), request("q1", "r1", agent="approval"), NOW, ENQUEUE)
    assert queued.decision.verdict == "queued"
    _, outcomes = on_boundary(queued.state, succeeded("r0"), NOW, ENQUEUE)
    (admitted,) = outcomes
    assert admitted.dispatch is not None
    assert admitted.dispatch.handover == after  # decided when r0 closed, behind it
    idle, _ = on_boundary(moved.state, succeeded(NEW), NOW, REJECT)
    back = decide(idle, request("q9", "r9"), NOW, REJECT).dispatch
    assert back is not None
    assert back.handover == Handover(run_id=NEW, agent="approval")


def test_messages_say_what_to_do() -> None:
    expired = interrupted(expiring("a", -MS))
    d = decide(expired, request(run_id=NEW, resume=resolve("a")), NOW, REJECT).decision
    assert "cancel" in d.message
    assert "a at 2026-03-01T12:00:00.249Z" in d.message
    d = decide(TWO_OPEN, request(run_id=NEW, resume=resolve("a")), NOW, REJECT).decision
    assert "omission is not abandonment" in d.message
    d = decide(running("r0"), request(run_id=NEW), NOW, REJECT).decision
    assert "'r0'" in d.message


def test_admission_marks_the_thread_running_so_a_racing_resume_is_busy() -> None:
    first = decide(TWO_OPEN, request("q1", "r1", resume=resolve("a", "b")), NOW, REJECT)
    second = decide(first.state, request("q2", "r2", resume=cancel("a", "b")), NOW, REJECT)
    assert first.decision.verdict == "admitted"
    assert (second.decision.code, second.dispatch) == ("thread_busy", None)


def test_a_retried_request_gets_the_same_decision_and_no_dispatch() -> None:
    admitted = decide(TWO_OPEN, request("q1", "r1", resume=resolve("a", "b")), NOW, REJECT)
    again = decide(
        admitted.state,
        request("q1", "r1", resume=resolve("a", "b")),
        NOW + timedelta(seconds=3),
        REJECT,
    )
    assert again.decision == admitted.decision.model_copy(update={"replayed": True})
    assert again.dispatch is None
    assert again.state is admitted.state


def test_a_retried_rejection_stays_rejected_after_the_thread_moved_on() -> None:
    busy = decide(running("r0"), request("q1", "r1"), NOW, REJECT)
    state, _ = on_boundary(busy.state, succeeded("r0"), NOW, REJECT)
    again = decide(state, request("q1", "r1"), NOW, REJECT)
    assert (again.decision.code, again.dispatch) == ("thread_busy", None)
    fresh_id = decide(state, request("q2", "r1"), NOW, REJECT)
    assert fresh_id.decision.verdict == "admitted"


def test_enqueue_holds_requests_and_decides_them_in_arrival_order() -> None:
    state = running("r0")
    for n in (1, 2):
        outcome = decide(state, request(f"q{n}", f"r{n}"), NOW, ENQUEUE)
        assert outcome.decision.verdict == "queued"
        assert outcome.dispatch is None
        assert f"position {n}" in outcome.decision.message
        state = outcome.state
    full = decide(state, request("q3", "r3"), NOW, ENQUEUE)
    assert full.decision.code == "thread_busy"
    assert "queue is full" in full.decision.message
    retry = decide(full.state, request("q1", "r1"), NOW, ENQUEUE)
    assert retry.decision.verdict == "queued"
    assert retry.state is full.state

    later = NOW + timedelta(seconds=1)
    state, outcomes = on_boundary(full.state, succeeded("r0"), later, ENQUEUE)
    assert [(o.decision.request_id, o.decision.verdict) for o in outcomes] == [("q1", "admitted")]
    assert outcomes[0].dispatch is not None
    assert outcomes[0].decision.decided_at == later
    assert (state.status, state.run_id, [q.request_id for q in state.queued]) == (
        "running",
        "r1",
        ["q2"],
    )
    assert decide(state, request("q1", "r1"), later, ENQUEUE).decision.verdict == "admitted"

    state, outcomes = on_boundary(state, failed("r1"), later, ENQUEUE)
    assert [(o.decision.request_id, o.decision.verdict) for o in outcomes] == [("q2", "admitted")]
    assert state.queued == []


def test_queued_requests_meet_the_interrupt_rules_when_the_run_interrupts() -> None:
    state = running("r0")
    plain = decide(state, request("q1", "r1"), NOW, ENQUEUE).state
    covering = decide(plain, request("q2", "r2", resume=resolve("a")), NOW, ENQUEUE).state
    state, outcomes = on_boundary(covering, interrupted_by("r0", interrupt("a")), NOW, ENQUEUE)
    assert [(o.decision.request_id, o.decision.code) for o in outcomes] == [
        ("q1", "uncovered_interrupts"),
        ("q2", None),
    ]
    assert state.status == "running"
    assert state.run_id == "r2"


def test_a_queued_request_whose_run_id_was_taken_meanwhile_is_a_duplicate() -> None:
    state = decide(running("r0"), request("q1", "r1"), NOW, ENQUEUE).state
    state = decide(state, request("q2", "r1"), NOW, ENQUEUE).state
    state, outcomes = on_boundary(state, succeeded("r0"), NOW, ENQUEUE)
    assert [o.decision.code for o in outcomes] == [None]
    state, outcomes = on_boundary(state, succeeded("r1"), NOW, ENQUEUE)
    assert [o.decision.code for o in outcomes] == ["duplicate_run_id"]
    assert state.status == "idle"


def test_drain_leaves_a_running_thread_alone() -> None:
    state = decide(running("r0"), request("q1", "r1"), NOW, ENQUEUE).state
    assert drain(state, NOW, ENQUEUE) == (state, [])


def test_a_stray_boundary_decides_nothing_queued() -> None:
    state = decide(running("r0"), request("q1", "r1"), NOW, ENQUEUE).state
    assert on_boundary(state, failed("elsewhere"), NOW, ENQUEUE) == (state, [])


def test_deciding_for_another_thread_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="decided against"):
        decide(fresh("other"), request(), NOW, REJECT)


def test_a_thread_remembers_a_bounded_history() -> None:
    state = fresh("t1")
    for n in range(200):
        state = decide(state, request(f"q{n}", f"r{n}"), NOW, REJECT).state
        state, _ = on_boundary(state, succeeded(f"r{n}"), NOW, REJECT)
        state = decide(state, request(f"q{n}-x", f"r{n}", resume=[entry("z")]), NOW, REJECT).state
    assert len(state.recent_run_ids) == 16
    assert len(state.recent_decisions) == 32
    assert decide(state, request("q199", "r199"), NOW, REJECT).decision.verdict == "admitted"


def test_drain_rejects_an_admission_the_check_says_cannot_be_written() -> None:
    start = running("r0").model_copy(
        update={"queued": [request("q1", "r1"), request("q2", "r2")]})
    refused = {"r1"}

    def check(outcome: Outcome) -> str | None:
        assert outcome.dispatch is not None, "only admissions are checked"
        return "too big" if outcome.dispatch.input.run_id in refused else None

    state, outcomes = on_boundary(start, failed("r0"), NOW, ENQUEUE, check)
    assert [(o.decision.request_id, o.decision.verdict, o.decision.code)
            for o in outcomes] == [("q1", "rejected", "invalid_input"), ("q2", "admitted", None)]
    assert outcomes[0].decision.message == "too big"
    assert outcomes[0].dispatch is None
    assert (state.status, state.run_id, state.queued) == ("running", "r2", [])
