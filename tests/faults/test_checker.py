"""The checker judged on hand-built histories: each invariant, kept and broken.

A checker that cannot fail proves nothing, so every violation kind is
produced here from a minimal history, and a Hypothesis property builds
random correct histories (clean) and then deletes or duplicates one record
(never clean).
"""

from __future__ import annotations

import dataclasses

import pytest
from ag_ui.core import RunErrorEvent, RunStartedEvent, TextMessageStartEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from faults.checker import Execution, Report, judge
from faults.world import World, finished, raw

pytestmark = pytest.mark.unit


def kinds(w: World) -> set[str]:
    return set(judge(w.records).kinds())


def clean(w: World) -> Report:
    report = judge(w.records)
    assert report.ok, report.describe()
    return report


def test_a_correct_interrupt_and_resume_history_is_clean() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.run("t1", "r1", "interrupt")
    w.request("t1", "r2", "q2", resume=[])
    w.decide("t1", "r2", "q2", "rejected", "uncovered_interrupts")
    req = w.request("t1", "r3", "q3", resume=[{"interruptId": "i1", "status": "resolved"}])
    w.decide("t1", "r3", "q3")
    w.dispatch(req)
    w.run("t1", "r3")
    w.state("t1", "running", "r1")
    w.state("t1", "idle", "r3")
    report = clean(w)
    assert report.counts["requests"] == 3
    assert report.counts["verdict.admitted"] == 2
    assert report.counts["code.uncovered_interrupts"] == 1
    assert report.counts["terminal.interrupt"] == 1
    assert report.counts["terminal.success"] == 1
    assert report.counts["threads.idle"] == 1


def test_an_undecided_request_is_dropped() -> None:
    w = World()
    w.request("t1", "r1", "q1")
    assert kinds(w) == {"request_undecided"}


def test_a_second_decision_for_one_record_is_a_duplicate() -> None:
    w = World()
    w.request("t1", "r1", "q1")
    w.decide("t1", "r1", "q1", "rejected", "thread_busy")
    w.decide("t1", "r1", "q1", "rejected", "thread_busy")
    assert kinds(w) == {"decision_duplicated"}


def test_a_retried_request_id_gets_one_decision_per_record_and_the_same_verdict() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.request("t1", "r1", "q1")
    w.decide("t1", "r1", "q1")
    w.run("t1", "r1")
    clean(w)
    w.request("t1", "r1", "q1")
    w.decide("t1", "r1", "q1", "rejected", "duplicate_run_id")
    assert kinds(w) == {"decision_inconsistent"}


def test_queued_then_decided_is_one_request_and_queued_forever_is_not() -> None:
    w = World()
    req = w.request("t1", "r1", "q1")
    w.decide("t1", "r1", "q1", "queued")
    w.decide("t1", "r1", "q1")
    w.dispatch(req)
    w.run("t1", "r1")
    clean(w)
    w.request("t2", "r1", "q2")
    w.decide("t2", "r1", "q2", "queued")
    assert kinds(w) == {"request_undecided"}


def test_unreadable_records_need_a_dead_letter() -> None:
    w = World()
    for value in (b"not json", b"[1, 2]", raw({"requestId": "q", "input": {"threadId": 5}}),
                  raw({"requestId": "", "input": {"threadId": "t"}}), None):
        w.raw_request(value)
    assert judge(w.records).kinds()["request_dropped"] == 5
    for rec in list(w.records.requests):
        w.dead_letter(rec)
    report = clean(w)
    assert report.counts["requests.deadlettered"] == 5
    assert report.counts["requests.malformed"] == 5


def test_an_empty_thread_id_is_an_id_a_decision_can_name() -> None:
    w = World()
    w.request("", "r1", "q1")
    assert kinds(w) == {"request_undecided"}
    w.decide("", "r1", "q1", "rejected", "thread_busy")
    clean(w)


def test_a_malformed_record_with_ids_is_decided_invalid_input() -> None:
    w = World()
    w.raw_request(raw({"requestId": "q1", "input": {"threadId": "t1", "runId": 7}}), "t1")
    w.decide("t1", None, "q1", "rejected", "invalid_input")
    clean(w)
    w.raw_request(raw({"requestId": "q2", "agent": "x", "input": {"threadId": "t1"}}), "t1")
    w.decide("t1", None, "q2", "rejected", "thread_busy")
    assert kinds(w) == {"malformed_not_invalid_input"}


def test_a_decision_for_no_request_is_reported() -> None:
    w = World()
    w.decide("t1", "r1", "ghost", "rejected", "thread_busy")
    assert kinds(w) == {"decision_without_request"}


def test_dispatch_must_match_admission_exactly_once() -> None:
    w = World()
    req = w.request("t1", "r1", "q1")
    w.decide("t1", "r1", "q1")
    assert kinds(w) == {"admission_without_dispatch"}
    w.dispatch(req)
    w.run("t1", "r1")
    clean(w)
    w.dispatch(req)
    assert kinds(w) == {"run_dispatched_twice", "request_dispatched_twice"}


def test_a_dispatch_without_admission_is_reported() -> None:
    w = World()
    req = w.request("t1", "r1", "q1")
    w.decide("t1", "r1", "q1", "rejected", "thread_busy")
    w.dispatch(req)
    w.run("t1", "r1")
    assert kinds(w) == {"dispatch_without_admission"}


def test_a_run_without_terminal_event_is_reported() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.event("t1", "r1", RunStartedEvent(thread_id="t1", run_id="r1"))
    assert kinds(w) == {"run_not_terminated"}


def test_a_dispatched_run_with_no_event_is_reported() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    assert kinds(w) == {"run_never_started"}


def test_two_terminal_events_are_reported_but_a_late_run_error_is_admitted() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.run("t1", "r1", "interrupt")
    w.event("t1", "r1", RunErrorEvent(message="worker lost", code="worker_lost"))
    assert clean(w).counts["runs.late_error"] == 1
    w.event("t1", "r1", RunErrorEvent(message="again", code="worker_lost"))
    assert kinds(w) == {"run_terminated_twice"}


def test_error_then_finished_is_two_terminals() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.run("t1", "r1", "error")
    w.event("t1", "r1", finished("t1", "r1"))
    assert kinds(w) == {"run_terminated_twice"}


def test_an_event_after_the_terminal_event_is_reported() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.run("t1", "r1")
    w.event("t1", "r1", TextMessageStartEvent(message_id="m2", role="assistant"))
    assert kinds(w) == {"event_after_terminal"}


def test_sequence_numbers_must_be_contiguous_from_zero() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.event("t1", "r1", RunStartedEvent(thread_id="t1", run_id="r1"))
    w.event("t1", "r1", finished("t1", "r1"), seq=2)
    assert kinds(w) == {"run_seq_gap"}


def test_duplicates_by_sequence_number_are_dropped_and_counted() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.event("t1", "r1", RunStartedEvent(thread_id="t1", run_id="r1"))
    w.event("t1", "r1", RunStartedEvent(thread_id="t1", run_id="r1"), seq=0)
    w.event("t1", "r1", finished("t1", "r1"), seq=1)
    w.event("t1", "r1", finished("t1", "r1"), seq=1)
    assert clean(w).counts["events.duplicates"] == 2


def test_one_sequence_number_for_two_different_events_is_a_conflict() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.event("t1", "r1", RunStartedEvent(thread_id="t1", run_id="r1"))
    w.event("t1", "r1", finished("t1", "r1"), seq=1)
    w.event("t1", "r1", RunErrorEvent(message="x"), seq=1)
    assert kinds(w) == {"run_seq_conflict"}


def test_a_run_must_open_with_run_started() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.event("t1", "r1", TextMessageStartEvent(message_id="m", role="assistant"))
    w.event("t1", "r1", finished("t1", "r1"))
    assert kinds(w) == {"run_not_opened"}


def test_events_of_a_run_never_dispatched_are_reported() -> None:
    w = World()
    w.run("t1", "rogue")
    assert kinds(w) == {"run_not_dispatched"}


def test_events_without_run_headers_are_unattributed() -> None:
    w = World()
    w.event("t1", "r1", RunStartedEvent(thread_id="t1", run_id="r1"), headers=False)
    assert kinds(w) == {"event_unattributed"}


def test_the_latest_thread_state_must_not_be_running_or_queueing() -> None:
    w = World()
    w.state("t1", "idle")
    w.state("t1", "running", "r9")
    assert kinds(w) == {"thread_left_running"}
    w.state("t1", "idle")
    clean(w)
    req = w.request("t2", "r1", "q1")
    w.decide("t2", "r1", "q1", "queued")
    w.decide("t2", "r1", "q1", "rejected", "thread_busy")
    w.state("t2", "interrupted", queued=[req])
    assert kinds(w) == {"thread_left_queued"}


def test_a_side_effect_twice_is_reported() -> None:
    w = World()
    w.records.executions = [Execution("t1", "i1"), Execution("t1", "i2"), Execution("t2", "i1")]
    assert clean(w).counts["executions"] == 3
    w.records.executions.append(Execution("t1", "i1", "r2"))
    assert kinds(w) == {"effect_repeated"}


# --------------------------------------------------------------------------- properties

Thread = list[str]  # the endings of the thread's runs, in order
histories = st.lists(
    st.lists(st.sampled_from(["success", "interrupt", "error", "rejected"]), min_size=1,
             max_size=4),
    min_size=1, max_size=6,
)


def build(threads: list[Thread]) -> World:
    """A correct history: each thread's requests decided, admitted runs run to their end."""
    w = World()
    for t, endings in enumerate(threads):
        thread_id = f"thread-{t}"
        for r, ending in enumerate(endings):
            run_id, request_id = f"run-{t}-{r}", f"req-{t}-{r}"
            if ending == "rejected":
                w.request(thread_id, run_id, request_id)
                w.decide(thread_id, run_id, request_id, "rejected", "thread_busy")
                continue
            w.admit(thread_id, run_id, request_id)
            w.run(thread_id, run_id, ending)
        w.state(thread_id, "idle")
    return w


@settings(max_examples=150, deadline=None)
@given(histories)
def test_correct_histories_are_clean(threads: list[Thread]) -> None:
    clean(build(threads))


@settings(max_examples=150, deadline=None)
@given(histories, st.sampled_from(["decisions", "dispatches", "events"]), st.data())
def test_losing_any_decision_dispatch_or_terminal_is_caught(
    threads: list[Thread], topic: str, data: st.DataObject
) -> None:
    w = build(threads)
    target = getattr(w.records, topic)
    if topic == "events":
        target[:] = [r for r in target if dict(r.headers).get("agui-event-type")
                     not in (b"TEXT_MESSAGE_START", b"TEXT_MESSAGE_CONTENT",
                             b"TEXT_MESSAGE_END")]
    if not target:
        return
    index = data.draw(st.integers(0, len(target) - 1))
    del target[index]
    assert not judge(w.records).ok


@settings(max_examples=150, deadline=None)
@given(histories, st.sampled_from(["decisions", "dispatches"]), st.data())
def test_repeating_any_decision_or_dispatch_is_caught(
    threads: list[Thread], topic: str, data: st.DataObject
) -> None:
    w = build(threads)
    target = getattr(w.records, topic)
    if not target:
        return
    rec = target[data.draw(st.integers(0, len(target) - 1))]
    target.append(rec)
    assert not judge(w.records).ok


@settings(max_examples=100, deadline=None)
@given(histories, st.data())
def test_losing_any_end_from_the_boundary_topic_is_caught(
    threads: list[Thread], data: st.DataObject
) -> None:
    w = build(threads)
    ends = [i for i, r in enumerate(w.records.runs)
            if dict(r.headers).get("agui-event-type") in (b"RUN_FINISHED", b"RUN_ERROR")]
    if not ends:
        return
    del w.records.runs[data.draw(st.sampled_from(ends))]
    assert "end_only_on_events" in judge(w.records).kinds()


def test_a_run_end_is_on_runs_if_and_only_if_it_is_on_events() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.run("t1", "r1", "interrupt")
    report = clean(w)
    assert report.counts["runs.boundaries"] == 2  # its RUN_STARTED and its end

    only_events = World()
    only_events.admit("t1", "r1", "q1")
    only_events.event("t1", "r1", RunStartedEvent(thread_id="t1", run_id="r1"))
    only_events.event("t1", "r1", finished("t1", "r1"), boundary=False)
    assert kinds(only_events) == {"end_only_on_events"}

    only_runs = World()
    only_runs.admit("t1", "r1", "q1")
    only_runs.event("t1", "r1", RunStartedEvent(thread_id="t1", run_id="r1"))
    only_runs.event("t1", "r1", RunErrorEvent(message="boom"))
    del only_runs.records.events[-1]
    assert "end_only_on_runs" in kinds(only_runs)


def test_the_boundary_topic_holds_the_same_records_and_only_boundaries() -> None:
    w = World()
    w.admit("t1", "r1", "q1")
    w.run("t1", "r1")
    end = w.records.runs[-1]
    w.records.runs[-1] = dataclasses.replace(
        end, value=raw({"type": "RUN_FINISHED", "threadId": "t1", "runId": "x"}))
    text = w.records.events[1]
    w.records.runs.append(text)
    assert kinds(w) == {"boundary_differs", "runs_not_boundary"}
