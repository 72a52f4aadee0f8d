"""One partition's book: quiet restore, the committed watermark, expiries by the state's clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from notifier_builders import SCOPE, T0, admitted, interrupt, interrupted, ms, state

from contracts.webhooks import WebhookEvent
from services.notifier.book import Book, commit_metadata, read_watermark

pytestmark = pytest.mark.unit

AT_10S = "2026-12-02T01:00:10Z"
AT_20S = "2026-12-02T01:00:20Z"


def _kinds(events: list[WebhookEvent]) -> list[tuple[str, list[str]]]:
    return [(e.kind, e.interrupt_ids) for e in events]


def test_restore_notifies_nothing_and_the_watermark_says_what_expired_before() -> None:
    book = Book(SCOPE, 0)
    book.restore("t1", interrupted(("r1", interrupt("a", AT_10S))))
    book.restore("t2", interrupted(("r2", interrupt("b", AT_20S)), thread_id="t2"))
    book.restore("t3", interrupted(("r3", interrupt("c")), thread_id="t3"))
    book.restore("t3", state("idle", thread_id="t3"))
    assert set(book.threads) == {"t1", "t2"}, "only threads with open interrupts are kept"
    book.activate(ms(T0 + timedelta(seconds=15)))
    assert book.advance(ms(T0 + timedelta(seconds=19))) == []
    assert _kinds(book.advance(ms(T0 + timedelta(seconds=20)))) == [("expired", ["b"])]
    assert book.advance(ms(T0 + timedelta(days=9))) == [], "a (before the watermark) was told"


def test_answered_in_time_is_never_expired_however_late_it_is_read() -> None:
    book = Book(SCOPE, 0)
    book.activate(ms(T0))
    assert _kinds(book.apply("t1", interrupted(("r1", interrupt("a", AT_10S))), T0)) == [
        ("interrupted", ["a"])]
    answer = state("running", decisions=[admitted("q", "r2", "a")],
                   updated_at=T0 + timedelta(seconds=9))
    events = book.apply("t1", answer, T0 + timedelta(hours=1))  # read an hour later
    assert _kinds(events) == [("answered", ["a"])]
    assert book.advance(ms(T0 + timedelta(days=1))) == []
    assert book.threads == {}


def test_answered_after_the_deadline_is_told_expired_first() -> None:
    book = Book(SCOPE, 0)
    book.activate(ms(T0))
    book.apply("t1", interrupted(("r1", interrupt("a", AT_10S))), T0)
    late = state("running", decisions=[admitted("q", "r2", "a")],
                 updated_at=T0 + timedelta(seconds=10))
    assert _kinds(book.apply("t1", late, T0)) == [("expired", ["a"]), ("answered", ["a"])]


def test_an_interrupt_raised_already_expired_is_told_at_once() -> None:
    book = Book(SCOPE, 0)
    book.activate(ms(T0 + timedelta(minutes=1)))
    s = interrupted(("r1", interrupt("a", AT_10S)), ("r1", interrupt("b", AT_20S)),
                    ("r1", interrupt("c")), updated_at=T0 + timedelta(seconds=15))
    assert _kinds(book.apply("t1", s, T0)) == [
        ("interrupted", ["a", "b", "c"]), ("expired", ["a"]), ("expired", ["b"])]


def test_the_clock_never_goes_back_and_due_expiries_come_in_deadline_order() -> None:
    book = Book(SCOPE, 0)
    book.activate(ms(T0))
    book.apply("t2", interrupted(("r2", interrupt("b", AT_20S)), thread_id="t2"), T0)
    book.apply("t1", interrupted(("r1", interrupt("a", AT_10S))), T0)
    assert book.next_deadline() == T0 + timedelta(seconds=10)
    events = book.advance(ms(T0 + timedelta(seconds=30)))
    assert [(e.thread_id, e.interrupt_ids) for e in events] == [("t1", ["a"]), ("t2", ["b"])]
    assert book.advance(ms(T0)) == []
    assert book.watermark_ms == ms(T0 + timedelta(seconds=30))


def test_the_heap_of_answered_interrupts_is_rebuilt_not_kept() -> None:
    book = Book(SCOPE, 0)
    book.activate(ms(T0))
    for n in range(5000):
        tid = f"t{n}"
        book.apply(tid, interrupted(("r", interrupt("a", AT_20S)), thread_id=tid), T0)
        book.apply(tid, state("idle", thread_id=tid), T0)
    assert book.threads == {}
    assert book.scheduled <= 2 * 1024 + 1
    assert book.advance(ms(T0 + timedelta(days=1))) == []


def test_the_watermark_travels_in_the_commit_metadata() -> None:
    assert read_watermark(commit_metadata(1_764_637_200_123)) == 1_764_637_200_123
    assert read_watermark(commit_metadata(0)) == 0
    assert read_watermark(None) is None
    assert read_watermark("") is None
    assert read_watermark("something else w=5") is None


def test_expiries_taken_one_at_a_time_never_leave_the_watermark_past_one_untold() -> None:
    """A restart from the watermark after any step tells every expiry not told yet."""
    states = {f"t{n}": interrupted(("r", interrupt("a", AT_10S if n < 3 else AT_20S)),
                                   thread_id=f"t{n}") for n in range(5)}
    book = Book(SCOPE, 0)
    book.activate(ms(T0))
    for tid, s in states.items():
        book.apply(tid, s, T0)
    now = ms(T0 + timedelta(seconds=30))
    told: list[str] = []
    steps = 0
    while True:
        told += [e.thread_id for e in book.advance(now, most=1)]
        steps += 1
        again = Book(SCOPE, 0)
        for tid, s in states.items():
            again.restore(tid, s)
        again.activate(book.watermark_ms)
        left = {e.thread_id for e in again.advance(now)}
        assert left | set(told) == set(states), (steps, told, left)
        if not book.due(now):
            break
    assert sorted(told) == sorted(states)
    assert steps == len(states)
    assert book.watermark_ms == now
