"""``RunSelector``: the requested run picked out of an upstream stream carrying several.

Replayed runs ahead of it are skipped (their last ``STATE_SNAPSHOT`` carried into
the requested run, their ``MESSAGES_SNAPSHOT`` not), boundaries naming another
thread or run are refused, and after the requested run's ``RUN_FINISHED`` only its
late ``RUN_ERROR`` or a next run's ``RUN_STARTED`` may come (AG-UI 1.0 rules 36-38,
64). The upstream's ``RUN_ERROR`` codes are namespaced.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from services.producer.upstream.runs import RunRuleError, RunSelector, relayed_error

pytestmark = pytest.mark.unit

IDS = {"threadId": "t1", "runId": "r1"}
OLD = {"threadId": "t1", "runId": "r0"}
TEXT = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hi"}
STATE = {"type": "STATE_SNAPSHOT", "snapshot": {"step": 3}}
HISTORY = {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "u0", "role": "user",
                                                      "content": "earlier"}]}


def started(ids: dict[str, str]) -> dict[str, Any]:
    return {"type": "RUN_STARTED", **ids}


def finished(ids: dict[str, str], outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "RUN_FINISHED", **ids, "outcome": outcome or {"type": "success"}}


def taken(*events: dict[str, Any]) -> tuple[RunSelector, list[dict[str, Any]]]:
    runs = RunSelector("t1", "r1")
    out = [wire for event in events for wire in runs.take(event)]
    return runs, out


def test_the_requested_run_alone_is_taken_without_its_run_started() -> None:
    runs, out = taken(started(IDS), TEXT, finished(IDS))
    assert out == [TEXT, finished(IDS)]
    assert runs.phase == "finished"


def test_a_stream_without_run_started_is_the_requested_run() -> None:
    runs, out = taken(TEXT, finished(IDS))
    assert out == [TEXT, finished(IDS)]
    assert runs.phase == "finished"


def test_replayed_runs_ahead_of_the_requested_one_are_skipped() -> None:
    stale = {"type": "interrupt", "interrupts": [{"id": "stale-1", "reason": "old"}]}
    runs, out = taken(started(OLD), HISTORY, STATE, finished(OLD, stale),
                      started({"threadId": "t1", "runId": "r00"}), {"type": "RUN_ERROR",
                                                                    "message": "x"},
                      started(IDS), TEXT, finished(IDS))
    # the state persists into the requested run; the history the client sent itself
    assert out == [STATE, TEXT, finished(IDS)]
    assert runs.skipped == 2
    assert runs.replays() == "'r0', 'r00'"


def test_a_replayed_runs_late_error_between_runs_is_skipped() -> None:
    _, out = taken(started(OLD), finished(OLD), {"type": "RUN_ERROR", "message": "late"},
                   started(IDS), finished(IDS))
    assert out == [finished(IDS)]


@pytest.mark.parametrize(("events", "said"), [
    ([started({"threadId": "t9", "runId": "r9"})], "another thread"),
    ([started({"threadId": "t9", "runId": "r1"})], "another thread"),
    ([started(IDS), TEXT, finished({"threadId": "t9", "runId": "r9"})],
     "RUN_FINISHED naming thread 't9', run 'r9'"),
    ([started(IDS), finished({"threadId": "t1", "runId": "r9"})], "run 'r9'"),
    ([TEXT, finished(OLD)], "run 'r0'"),
    ([started(IDS), started(OLD)], "while run 'r1' was open"),
    ([started(IDS), started(IDS)], "while run 'r1' was open"),
    ([started(OLD), started({"threadId": "t1", "runId": "r00"})], "while replayed run"),
    ([started(OLD), finished({"threadId": "t1", "runId": "r9"})], "replayed run 'r0'"),
    ([started(OLD), finished(OLD), TEXT], "after replayed run 'r0' finished"),
], ids=["foreign-thread-and-run", "foreign-thread", "foreign-finish", "other-run-finish",
        "finish-of-another-run", "nested-start", "started-twice", "nested-replay",
        "replay-finished-by-another", "event-between-runs"])
def test_boundaries_naming_another_thread_or_run_are_refused(
        events: list[dict[str, Any]], said: str) -> None:
    with pytest.raises(RunRuleError, match=re.escape(said)):
        taken(*events)


def test_after_its_finish_a_run_error_is_late_and_a_run_started_a_next_run() -> None:
    runs, _ = taken(started(IDS), finished(IDS))
    assert runs.after({"type": "RUN_ERROR", "message": "flush failed"}) == "late_error"
    runs, _ = taken(started(IDS), finished(IDS))
    assert runs.after(started({"threadId": "t1", "runId": "r2"})) == "next_run"


@pytest.mark.parametrize("event", [TEXT, started({"threadId": "t9", "runId": "r2"}),
                                   finished(IDS)], ids=["content", "foreign-run", "finish"])
def test_anything_else_after_its_finish_is_refused(event: dict[str, Any]) -> None:
    runs, _ = taken(started(IDS), finished(IDS))
    with pytest.raises(RunRuleError, match="after run 'r1' finished"):
        runs.after(event)


def test_the_requested_runs_run_error_ends_it_its_code_namespaced() -> None:
    runs, out = taken(started(IDS), {"type": "RUN_ERROR", "message": "x", "code": "worker_lost"})
    assert out == [{"type": "RUN_ERROR", "message": "x", "code": "upstream.worker_lost"}]
    assert runs.phase == "ended"


def test_an_upstream_run_error_without_a_code_is_upstream_error() -> None:
    assert relayed_error({"type": "RUN_ERROR", "message": "x"})["code"] == "upstream_error"


def test_what_an_unended_stream_left_undone_is_said() -> None:
    assert "before run 'r1' started (after replaying 'r0')" in taken(
        started(OLD), finished(OLD))[0].unended()
    assert "without the RUN_FINISHED or RUN_ERROR of run 'r1'" in taken(
        started(IDS), TEXT)[0].unended()
