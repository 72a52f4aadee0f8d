"""Thread tables from the compacted topic, and run summaries from events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from ag_ui.core import Interrupt

from contracts import OpenInterrupt, ThreadState, TopicCatalog
from contracts.codec import to_wire
from services.cli.ops.threadview import row_of, select, summarize_runs
from services.kafka.records import (
    OpsRecord,
    drop_duplicate_events,
    latest_states,
    parse_value,
    role_of,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def state_rec(offset: int, state: ThreadState | None, key: str | None = None) -> OpsRecord:
    value = None if state is None else to_wire(state)
    return OpsRecord("p.threads", "threads", 0, offset, 0, key or (state and state.thread_id),
                     {}, value)


def st8(tid: str, status: str = "idle", agent: str = "scripted", minute: int = 0,
        interrupts: tuple[Interrupt, ...] = ()) -> ThreadState:
    return ThreadState(thread_id=tid, status=status, agent=agent,  # type: ignore[arg-type]
                       run_id="r", updated_at=datetime(2026, 11, 30, 11, minute, tzinfo=UTC),
                       open_interrupts=[OpenInterrupt(run_id="r", interrupt=i)
                                        for i in interrupts])


def test_last_record_per_key_wins_and_tombstones_delete() -> None:
    records = [state_rec(0, st8("a")), state_rec(1, st8("b")),
               state_rec(2, st8("a", "running")), state_rec(3, None, key="b"),
               OpsRecord("p.threads", "threads", 0, 4, 0, "c", {}, "{not json")]
    states, warnings = latest_states(records)
    assert set(states) == {"a"}
    assert states["a"].status == "running"
    assert len(warnings) == 1
    assert "@4" in warnings[0]


def test_a_state_keyed_otherwise_than_its_thread_id_is_skipped_with_a_warning() -> None:
    """``agui-relay threads`` listed another writer's state under the key it was written
    with; README (Limits): a thread state keyed otherwise than its threadId is skipped."""
    records = [state_rec(0, st8("a")), state_rec(1, st8("b-other"), key="b")]
    states, warnings = latest_states(records)
    assert set(states) == {"a"}
    assert len(warnings) == 1
    assert "@1" in warnings[0]
    assert "names thread 'b-other': skipped" in warnings[0]


def test_row_has_oldest_expiry_and_expired_ids() -> None:
    state = st8("a", "interrupted", interrupts=(
        Interrupt(id="i1", reason="x", expires_at="2026-11-30T13:00:00Z"),
        Interrupt(id="i2", reason="x", expires_at="2026-11-30T11:30:00+00:00"),
        Interrupt(id="i3", reason="x", expires_at="nonsense"),
        Interrupt(id="i4", reason="x")))
    row = row_of(state, NOW)
    assert row.open_interrupts == ("i1", "i2", "i3", "i4")
    assert row.oldest_expiry == "2026-11-30T11:30:00+00:00"
    assert row.expired == ("i2",)
    assert row.to_json()["openInterrupts"] == ["i1", "i2", "i3", "i4"]


def test_a_child_threads_row_names_the_parent_it_is_answered_at() -> None:
    child = st8("t-top/review-0a1b", "interrupted", interrupts=(Interrupt(id="s", reason="x"),))
    assert row_of(child, NOW).to_json()["childOf"] is None  # no parentRunId: a client's
    marked = row_of(child.model_copy(update={"parent_run_id": "top-r1"}), NOW)
    assert marked.child_of == "t-top"
    assert marked.to_json()["childOf"] == "t-top"


def test_select_filters_and_orders_by_activity() -> None:
    stale = Interrupt(id="old", reason="x", expires_at="2020-01-01")
    rows = [row_of(s, NOW) for s in (
        st8("a", "idle", minute=1),
        st8("b", "interrupted", "approval", minute=5, interrupts=(stale,)),
        st8("c", "interrupted", minute=3, interrupts=(Interrupt(id="i", reason="x"),)))]
    assert [r.thread_id for r in select(rows)] == ["b", "c", "a"]
    assert [r.thread_id for r in select(rows, status="interrupted")] == ["b", "c"]
    assert [r.thread_id for r in select(rows, expired=True)] == ["b"]
    assert [r.thread_id for r in select(rows, agent="scripted")] == ["c", "a"]


def ev(run: str, kind: str, ts: int, body: dict[str, Any] | None = None, seq: int = 0
       ) -> OpsRecord:
    headers = {"agui-run-id": run, "agui-event-type": kind, "agui-agent": "scripted",
               "agui-seq": str(seq)}
    return OpsRecord("p.events", "events", 0, ts, ts, "t", headers, {"type": kind, **(body or {})})


def test_runs_are_summarized_with_outcomes() -> None:
    events = [
        ev("r1", "RUN_STARTED", 1, {"runId": "r1"}),
        ev("r1", "RUN_FINISHED", 2, {"outcome": {"type": "interrupt", "interrupts": [
            {"id": "i1", "reason": "x"}]}}),
        ev("r2", "RUN_STARTED", 3, {"runId": "r2", "parentRunId": "p0", "input": {
            "resume": [{"interruptId": "i1", "status": "cancelled"}]}}),
        ev("r2", "TEXT_MESSAGE_CONTENT", 4),
        ev("r2", "RUN_FINISHED", 5),
        ev("r3", "RUN_STARTED", 6),
        ev("r3", "RUN_ERROR", 7, {"code": "worker_lost", "message": "gone"}),
        ev("r4", "RUN_STARTED", 8),
        ev("r1", "RUN_ERROR", 9, {"message": "late"}),
    ]
    runs = {r.run_id: r for r in summarize_runs(events)}
    assert list(runs) == ["r1", "r2", "r3", "r4"]
    assert runs["r1"].outcome == "error: error (after interrupt)"
    assert runs["r1"].interrupt_ids == ["i1"]
    assert runs["r2"].outcome == "success"
    assert runs["r2"].resume == ["i1=cancelled"]
    assert runs["r2"].parent_run_id == "p0"
    assert runs["r2"].events == 3
    assert runs["r3"].outcome == "error: worker_lost"
    assert runs["r4"].outcome == "open"
    assert runs["r4"].agent == "scripted"


def test_duplicate_events_are_dropped_by_run_and_seq() -> None:
    records = [ev("r1", "RUN_STARTED", 1, seq=0), ev("r1", "RUN_STARTED", 2, seq=0),
               ev("r1", "RUN_FINISHED", 3, seq=1), ev("r2", "RUN_STARTED", 4, seq=0)]
    assert [r.offset for r in drop_duplicate_events(records)] == [1, 3, 4]


def test_roles_and_values() -> None:
    catalog = TopicCatalog("p")
    assert role_of("p.events", catalog) == "events"
    assert role_of("p.dispatch.approval", catalog) == "dispatch"
    assert role_of("q.events", catalog) == "other"
    assert parse_value(b'{"a":1}') == {"a": 1}
    assert parse_value(b"\xffnot json") == "\ufffdnot json"
    assert parse_value(None) is None
