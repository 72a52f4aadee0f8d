"""Orphaned child threads: interrupted children their parent no longer waits on.

A child's interrupts are offered only on its parent, carried up; a child whose
parent moved on (its run lost with its worker) is offered nowhere. ``stuck``
lists it with the command that cancels it, and counts children's interrupts
apart from the ones people are offered.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from ag_ui.core import Interrupt
from rich.console import Console

from contracts import OpenInterrupt, ThreadState
from contracts.records import CHILD_KEY
from services.cli.ops.orphans import child_of, orphans, waits_on
from services.cli.ops.resume_plan import ResumeOptions, plan_resume
from services.cli.ops.stuck import print_report, report_json
from services.gatekeeper.census import examine
from services.producer.delegation import CHILD_METADATA

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CHILD = "t-top/review-0123456789abcdef"


def carried(child_thread: str, iid: str = "review/sign-off") -> Interrupt:
    return Interrupt(id=iid, reason="approval", metadata={CHILD_KEY: {
        "agent": "pipeline_child", "threadId": child_thread, "runId": "c1",
        "interruptId": "sign-off"}})


def thread(thread_id: str, status: str, *interrupts: Interrupt,
           parent_run_id: str | None = None) -> ThreadState:
    return ThreadState(thread_id=thread_id, status=status,  # type: ignore[arg-type]
                       agent="pipeline_child" if parent_run_id else "pipeline_parent",
                       run_id="r1", parent_run_id=parent_run_id,
                       interrupted_run_id="r1" if interrupts else None,
                       open_interrupts=[OpenInterrupt(run_id="r1", interrupt=i)
                                        for i in interrupts])


def child(status: str = "interrupted") -> ThreadState:
    opened = (Interrupt(id="sign-off", reason="approval"),) if status == "interrupted" else ()
    return thread(CHILD, status, *opened, parent_run_id="top-r1")


def by_id(*states: ThreadState) -> dict[str, ThreadState]:
    return {s.thread_id: s for s in states}


def test_the_metadata_key_is_the_one_the_delegation_writes() -> None:
    assert CHILD_KEY == CHILD_METADATA


def test_a_carried_up_interrupt_names_its_child_and_a_thread_s_own_names_none() -> None:
    assert child_of(carried(CHILD)) == CHILD
    assert child_of(Interrupt(id="i", reason="r")) is None
    assert child_of(Interrupt(id="i", reason="r", metadata={CHILD_KEY: "t"})) is None
    assert child_of(Interrupt(id="i", reason="r", metadata={CHILD_KEY: {"threadId": 3}})) is None


@pytest.mark.parametrize(("parent", "waiting"), [
    (thread("t-top", "interrupted", carried(CHILD)), True),
    (thread("t-top", "running"), True),  # carrying it up, or routing the answers down, now
    (thread("t-top", "idle"), False),  # its run was lost (worker_lost) or ended
    (thread("t-top", "interrupted", carried(f"{CHILD}x")), False),  # another child's
    (thread("t-top", "interrupted", Interrupt(id="own", reason="r")), False),
    (None, False),  # no state for the parent at all
])
def test_a_parent_waits_on_a_child_it_carried_up_or_while_it_runs(
        parent: ThreadState | None, waiting: bool) -> None:
    assert waits_on(parent, CHILD) is waiting
    states = by_id(child(), *([parent] if parent else []))
    found = orphans(states)
    assert [o.state.thread_id for o in found] == ([] if waiting else [CHILD])
    if found:
        (orphan,) = found
        assert orphan.parent_thread == "t-top"
        assert orphan.parent == parent
        assert orphan.command == f"agui-relay resume --cancel-all -- {CHILD}"


def test_only_interrupted_children_are_orphans() -> None:
    idle_parent = thread("t-top", "idle")
    for status in ("running", "idle"):
        assert orphans(by_id(idle_parent, child(status))) == []
    client_run = thread(CHILD, "interrupted", Interrupt(id="q", reason="r"))  # no parentRunId
    assert orphans(by_id(idle_parent, client_run)) == []


def test_the_command_an_orphan_is_listed_with_is_one_the_gatekeeper_admits() -> None:
    (orphan,) = orphans(by_id(thread("t-top", "idle"), child()))
    assert plan_resume(orphan.state, ResumeOptions(cancel_all=True), NOW).ok
    refused = plan_resume(orphan.state, ResumeOptions(resolve=[("sign-off", True)]), NOW)
    assert [p.code for p in refused.problems] == ["answer_at_parent"]


def test_stuck_counts_a_pipeline_question_once_and_lists_the_orphans() -> None:
    late = (NOW - timedelta(minutes=1)).isoformat()
    waiting_parent = thread("t-top", "interrupted",
                            carried(CHILD).model_copy(update={"expires_at": late}))
    waited_on = thread(CHILD, "interrupted", Interrupt(id="sign-off", reason="approval",
                                                       expires_at=late),
                       parent_run_id="top-r1")
    lost = thread("t-lost/review-1", "interrupted", Interrupt(id="sign-off", reason="a"),
                  parent_run_id="lost-r1")
    states = by_id(waiting_parent, waited_on, thread("t-lost", "idle"), lost)
    limit = timedelta(minutes=5)
    counts, stuck = examine(states.values(), NOW, limit)
    doc = report_json(counts, stuck, NOW, limit, orphans(states))
    assert (doc["openInterrupts"], doc["expiredInterrupts"], doc["childInterrupts"]) == (1, 1, 2)
    assert [t["threadId"] for t in doc["threads"]] == ["t-top"]  # expired: cancel at the top
    assert doc["orphans"] == [{
        "threadId": "t-lost/review-1", "agent": "pipeline_child", "runId": "r1",
        "parentThreadId": "t-lost", "parentRunId": "lost-r1", "parentStatus": "idle",
        "openInterrupts": ["sign-off"],
        "command": "agui-relay resume --cancel-all -- t-lost/review-1"}]
    console = Console(width=250, record=True)
    print_report(console, counts, stuck, limit, orphans(states))
    text = " ".join(console.export_text().split())
    assert "1 of 1 open interrupts past their expiry; 2 more open on child threads" in text
    assert "1 child threads their parent no longer waits on" in text
    assert "agui-relay resume --cancel-all -- t-lost/review-1" in text
