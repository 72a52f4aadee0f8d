"""The expiry policy's pure half: lapse times, the timer heap, and the rules for its resume."""

from __future__ import annotations

from datetime import timedelta

import pytest
from gatekeeper_builders import (
    ENQUEUE,
    LENIENT,
    NOW,
    REJECT,
    cancel,
    expiring,
    interrupt,
    interrupted,
    interrupted_by,
    request,
    resolve,
    running,
    succeeded,
)

from contracts import ThreadState
from services.agui.jsdate import to_epoch_ms
from services.gatekeeper.expiry_policy import (
    HEAP_SLACK,
    Deadlines,
    expiry_request,
    lapses_at,
    request_id_for,
    run_id_for,
)
from services.gatekeeper.rules import decide, on_boundary
from services.gatekeeper.thread import fresh

pytestmark = pytest.mark.unit

SECOND = timedelta(seconds=1)
HISTORY = {"messages": [{"id": "u1", "role": "user", "content": "go"}], "state": {"k": 1}}


def lapsed(*delays: timedelta, run_id: str = "r0") -> ThreadState:
    """A thread interrupted by ``run_id`` with one interrupt per delay (relative to NOW)."""
    return interrupted(*(expiring(f"i{n}", d) for n, d in enumerate(delays)), run_id=run_id)


def test_a_thread_lapses_when_its_last_interrupt_expires_and_never_with_one_that_does_not() -> None:
    assert lapses_at(lapsed(-SECOND, 5 * SECOND)) == to_epoch_ms(NOW + 5 * SECOND)
    assert lapses_at(interrupted(expiring("a", SECOND), interrupt("b"))) is None
    assert lapses_at(interrupted(interrupt("a", expires_at="next tuesday"))) is None
    assert lapses_at(running()) is None
    assert lapses_at(fresh("t")) is None


def test_the_resume_is_complete_and_its_ids_are_the_same_every_time() -> None:
    state = lapsed(-SECOND, -SECOND).model_copy(update={"principal": "alice"})
    req = expiry_request(state, HISTORY, NOW)
    assert req == expiry_request(state, HISTORY, NOW)
    assert (req.request_id, req.input.run_id) == ("expiry:r0", run_id_for("r0"))
    assert (req.principal, req.policy, req.agent) == ("alice", "expiry", "scripted")
    assert req.input.thread_id == state.thread_id
    assert req.input.state == {"k": 1}
    assert [m.id for m in req.input.messages] == ["u1"]
    assert [(e.interrupt_id, e.status) for e in req.input.resume or []] == [
        ("i0", "cancelled"), ("i1", "cancelled")]
    long_run = "r" * 250
    assert len(request_id_for(long_run)) <= 200
    assert request_id_for(long_run) != request_id_for(long_run[:-1])


def test_admitted_once_all_have_expired_saying_it_was_the_policy() -> None:
    state = lapsed(-SECOND, -2 * SECOND)
    outcome = decide(state, expiry_request(state, HISTORY, NOW), NOW, REJECT)
    assert outcome.decision.verdict == "admitted"
    assert outcome.decision.policy == "expiry"
    assert outcome.decision.message.startswith("expiry policy (AGUI_ON_EXPIRY=cancel)")
    assert outcome.dispatch is not None
    assert outcome.state.status == "running"
    again = decide(outcome.state, expiry_request(state, HISTORY, NOW), NOW, REJECT)
    assert again.dispatch is None
    assert again.decision == outcome.decision.model_copy(update={"replayed": True})


def test_not_before_every_interrupt_has_expired() -> None:
    state = lapsed(-SECOND, SECOND)
    early = expiry_request(state.model_copy(update={"open_interrupts": state.open_interrupts}),
                           HISTORY, NOW)
    outcome = decide(state, early, NOW, REJECT)
    assert (outcome.decision.verdict, outcome.decision.code) == ("rejected", "invalid_input")
    assert outcome.dispatch is None


@pytest.mark.parametrize("policy", [REJECT, ENQUEUE, LENIENT])
def test_a_client_resume_admitted_first_leaves_the_policy_s_rejected_never_queued(
        policy: object) -> None:
    state = lapsed(-SECOND)
    policy_request = expiry_request(state, HISTORY, NOW)
    client = decide(state, request("c1", "r1", resume=cancel("i0")), NOW, policy)  # type: ignore[arg-type]
    assert client.decision.verdict == "admitted"
    busy = decide(client.state, policy_request, NOW, policy)  # type: ignore[arg-type]
    assert (busy.decision.verdict, busy.decision.code) == ("rejected", "thread_busy")
    assert busy.state.queued == []
    idle, _ = on_boundary(client.state, succeeded("r1"), NOW, REJECT)
    late = decide(idle, policy_request.model_copy(update={"request_id": "expiry:other"}), NOW,
                  policy)  # type: ignore[arg-type]
    assert (late.decision.verdict, late.decision.code) == ("rejected", "unknown_interrupt")
    assert late.dispatch is None


def test_a_stale_policy_request_does_not_cancel_a_later_interruption() -> None:
    first = lapsed(-SECOND, run_id="r0")
    stale = expiry_request(first, HISTORY, NOW)
    resumed = decide(first, request("c1", "r1", resume=cancel("i0")), NOW, REJECT)
    again, _ = on_boundary(resumed.state, interrupted_by("r1", expiring("i0", -SECOND)), NOW,
                           REJECT)
    outcome = decide(again, stale, NOW, REJECT)
    assert (outcome.decision.verdict, outcome.decision.code) == ("rejected", "unknown_interrupt")


def test_a_client_resolving_an_expired_interrupt_gets_interrupt_expired() -> None:
    state = lapsed(-SECOND)
    outcome = decide(state, request("c1", "r1", resume=resolve("i0")), NOW, REJECT)
    assert outcome.decision.code == "interrupt_expired"


def test_deadlines_pop_each_lapsed_thread_once_as_it_is_now() -> None:
    book = Deadlines()
    a = lapsed(-SECOND).model_copy(update={"thread_id": "a"})
    b = lapsed(10 * SECOND).model_copy(update={"thread_id": "b"})
    never = interrupted(interrupt("x")).model_copy(update={"thread_id": "n"})
    states = {(0, s.thread_id): s for s in (a, b, never)}
    book.watch(0, states.values())
    book.watch(0, [a])  # the same again: no second entry
    assert len(book) == 2
    now_ms = to_epoch_ms(NOW)
    current = lambda p, t: states.get((p, t))  # noqa: E731
    assert [s.thread_id for _, s in book.due(now_ms, current)] == ["a"]
    assert book.due(now_ms, current) == []
    assert book.next_at() == to_epoch_ms(NOW + 10 * SECOND)
    resumed = running("r9", thread_id="b")
    states[(0, "b")] = resumed
    book.watch(0, [resumed])  # resumed by a client: no longer due
    assert book.due(now_ms + 60_000, current) == []
    book.watch(1, [b])
    book.forget([1])
    assert book.due(now_ms + 60_000, current) == []
    book.watch(2, [a])
    assert book.due(now_ms, lambda p, t: a) == [(2, a)]
    book.retry(2, a, now_ms + 5)  # could not be sent: once more, later
    assert book.due(now_ms, lambda p, t: a) == []
    assert book.due(now_ms + 5, lambda p, t: a) == [(2, a)]


def test_answered_and_handed_back_threads_leave_no_heap_entries_behind() -> None:
    """A week's TTL answered in minutes: the superseded entries are dropped, not kept until
    their instant, and watching a partition again after a takeover adds none for good."""
    book = Deadlines()
    week = timedelta(days=7)
    for n in range(5_000):
        thread = f"t{n}"
        book.watch(0, [lapsed(week).model_copy(update={"thread_id": thread})])
        book.watch(0, [running("r9", thread_id=thread)])
    assert len(book) == 0
    assert book.entries <= HEAP_SLACK
    held = [lapsed(week, run_id=f"r{n}").model_copy(update={"thread_id": f"h{n}"})
            for n in range(100)]
    for _ in range(200):  # takeovers: forgotten, then watched again
        book.forget([0])
        book.watch(0, held)
    assert len(book) == 100
    assert book.entries <= 2 * 100 + HEAP_SLACK
    book.retry(0, held[0], to_epoch_ms(NOW))
    assert [s.thread_id for _, s in book.due(to_epoch_ms(NOW), lambda p, t: held[0])] == ["h0"]
    assert len(book) == 99


def test_a_late_answer_to_a_cancelled_interrupt_keeps_getting_interrupt_expired() -> None:
    state = lapsed(-SECOND)
    cancelled = decide(state, expiry_request(state, HISTORY, NOW), NOW, REJECT)
    assert cancelled.state.lapsed == ["i0"]
    late = request("c1", "r1", resume=resolve("i0"))
    while_running = decide(cancelled.state, late, NOW, REJECT)
    assert (while_running.decision.code, while_running.decision.interrupt_ids) == (
        "interrupt_expired", None)
    assert "cancelled by the expiry policy" in while_running.decision.message
    idle, _ = on_boundary(cancelled.state, succeeded(run_id_for("r0")), NOW, REJECT)
    assert decide(idle, late, NOW, REJECT).decision.code == "interrupt_expired"
    # the same id raised again later is a new interrupt, answered by the usual rules
    again, _ = on_boundary(decide(idle, request("c2", "r2"), NOW, REJECT).state,
                           interrupted_by("r2", interrupt("i0")), NOW, REJECT)
    assert decide(again, request("c3", "r3", resume=resolve("i0")), NOW,
                  REJECT).decision.verdict == "admitted"


def test_a_client_decision_under_the_policy_s_request_id_never_answers_the_policy() -> None:
    """A client's request sent under ``expiry:<run>`` before the deadline is refused and
    remembered; the policy's own request under that id is still decided, and admitted."""
    state = lapsed(SECOND)
    policy_request = expiry_request(state, HISTORY, NOW)
    squat = decide(state, request(policy_request.request_id, "junk", resume=[]), NOW, REJECT)
    assert (squat.decision.verdict, squat.decision.code) == ("rejected", "uncovered_interrupts")
    due = decide(squat.state, policy_request, NOW + 2 * SECOND, REJECT)
    assert (due.decision.verdict, due.decision.policy, due.decision.run_id) == (
        "admitted", "expiry", run_id_for("r0"))
    assert due.dispatch is not None
    again = decide(due.state, policy_request, NOW + 3 * SECOND, REJECT)
    assert (again.decision, again.dispatch) == (due.decision.model_copy(
        update={"replayed": True}), None)
