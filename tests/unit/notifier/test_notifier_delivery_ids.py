"""Delivery ids: one per notification, kept across redeliveries, never shared by two.

A thread remembers only its last ``RECENT_RUNS`` run ids, so a later run may
reuse an earlier one's runId and raise an interrupt of the same id (an agent
with deterministic ids): another question, which a receiver remembering the
ids it handled (as the README asks) must not drop as a resend. And the same
notification, read again after a restart (from whichever record compaction
kept), must keep its id.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from ag_ui.core import Interrupt
from notifier_builders import SCOPE, T0, admitted, interrupted, ms, state

from contracts import OpenInterrupt, ThreadState
from services.gatekeeper.thread import RECENT_RUNS, knows_run, remember_run
from services.notifier.book import Book

pytestmark = pytest.mark.unit

FIRST = Interrupt(id="confirm", reason="tool_approval", message="Delete /tmp/a?")
SECOND = Interrupt(id="confirm", reason="tool_approval", message="Wire $10,000 to X?")
DAY = timedelta(days=1)


def _dated(interrupt: Interrupt, opened: timedelta, at: timedelta) -> ThreadState:
    """``r1`` holding ``interrupt`` opened at T0+``opened``, as the gatekeeper writes it."""
    held = interrupted(("r1", interrupt), updated_at=T0 + at)
    return held.model_copy(update={"open_interrupts": [
        OpenInterrupt(run_id="r1", interrupt=interrupt, opened_at=T0 + opened)]})


def _book() -> Book:
    book = Book(SCOPE, 0)
    book.activate(ms(T0))
    return book


def test_a_new_question_never_reuses_an_earlier_notifications_delivery_id() -> None:
    runs: list[str] = []
    for run_id in ["r1", *(f"r{n}" for n in range(2, RECENT_RUNS + 2))]:
        runs = remember_run(runs, run_id)
    later = state("idle").model_copy(update={"run_id": runs[-1], "recent_run_ids": runs})
    assert not knows_run(later, "r1"), "the 18th run may be called r1 again"

    book = _book()
    asked = book.apply("t1", interrupted(("r1", FIRST)), T0)
    answered = book.apply("t1", state("running", decisions=[admitted("q2", "r2", "confirm")]),
                          T0 + timedelta(minutes=1))
    book.apply("t1", state("idle"), T0 + timedelta(minutes=2))
    asked_again = book.apply("t1", interrupted(("r1", SECOND), updated_at=T0 + DAY), T0 + DAY)
    answered_again = book.apply("t1", state("running", decisions=[
        admitted("q9", "r9", "confirm")]), T0 + DAY)
    events = asked + answered + asked_again + answered_again
    assert [e.kind for e in events] == ["interrupted", "answered", "interrupted", "answered"]
    assert asked[0].interrupts != asked_again[0].interrupts, "two different questions"
    assert len({e.delivery_id for e in events}) == 4, (
        "the second question and its answer reuse the first's delivery ids: a receiver "
        "remembering ids drops them")


def test_a_question_dated_anew_is_another_even_with_no_state_between() -> None:
    """Compaction may leave no state between the two questions: openedAt tells them apart."""
    book = _book()
    asked = book.apply("t1", _dated(FIRST, timedelta(0), timedelta(0)), T0)
    then = book.apply("t1", _dated(SECOND, DAY, DAY), T0 + DAY)
    assert [(e.kind, e.run_id, e.interrupt_ids) for e in then] == \
        [("answered", "r1", ["confirm"]), ("interrupted", "r1", ["confirm"])]
    assert then[1].delivery_id != asked[0].delivery_id


def test_a_redelivery_keeps_its_id_whichever_record_it_is_read_from() -> None:
    """Live, or restored after a restart from a later record (the first compacted away)."""
    opened = _dated(FIRST, timedelta(0), timedelta(0))
    still_open = _dated(FIRST, timedelta(0), timedelta(minutes=5))
    resumed = state("running", decisions=[admitted("q2", "r2", "confirm")],
                    updated_at=T0 + timedelta(minutes=9))

    live = _book()
    asked = live.apply("t1", opened, T0)
    live.apply("t1", still_open, T0 + timedelta(minutes=5))
    answered = live.apply("t1", resumed, T0 + timedelta(minutes=9))

    again = Book(SCOPE, 0)
    again.restore("t1", opened)
    again.activate(ms(T0))
    assert again.apply("t1", still_open, T0 + timedelta(minutes=5)) == []
    compacted = Book(SCOPE, 0)
    compacted.restore("t1", still_open)
    compacted.activate(ms(T0))
    for book in (again, compacted):
        assert book.apply("t1", resumed, T0 + timedelta(minutes=9)) == answered

    replayed = _book()
    assert replayed.apply("t1", opened, T0) == asked, "a re-read of the same record"
