"""An interrupt is dated by the gatekeeper when it opens (``OpenInterrupt.opened_at``),
and the inbox orders by that date: the same on every consumer instance.

Found by probing: the inbox's sort key (and so a ``GET /interrupts`` cursor) used the
``updatedAt`` of the first state *an instance* saw holding the interrupt. The
gatekeeper rewrites an interrupted thread's state whenever it rejects a request on it
(a later ``updatedAt``, the same interrupts), so an instance that restored its states
from ``AGUI_STATE_DIR`` (or read a compacted topic) after a rejection dated the
interrupt later than one that watched it open: the two ordered the same interrupts
differently, and a walk from one to the other skipped one.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from gatekeeper_builders import NOW, REJECT, interrupt, interrupted_by, request, resolve

from contracts import ThreadState, decode
from services.consumer.interrupt_order import decode_cursor, encode_cursor
from services.consumer.interrupts import Filters, InterruptIndex
from services.gatekeeper import wire
from services.gatekeeper.rules import decide, on_boundary
from services.gatekeeper.thread import fresh

pytestmark = pytest.mark.unit


def interrupted_at(thread: str, iid: str, at: timedelta) -> ThreadState:
    admitted = decide(fresh(thread), request(f"q-{thread}", f"r-{thread}", thread_id=thread),
                      NOW + at, REJECT)
    state, _ = on_boundary(admitted.state, interrupted_by(f"r-{thread}", interrupt(iid)),
                           NOW + at, REJECT)
    assert state.status == "interrupted"
    return state


def rejected_later(state: ThreadState, at: timedelta) -> ThreadState:
    """``state`` after a resume naming a wrong interrupt was rejected on it ``at`` later."""
    outcome = decide(state, request("q-bad", "r-bad", thread_id=state.thread_id,
                                    resume=resolve("nope")), NOW + at, REJECT)
    assert outcome.decision.verdict == "rejected"
    assert outcome.state.updated_at == NOW + at
    return outcome.state


def page(index: InterruptIndex, after: str | None) -> tuple[list[str], str | None]:
    found = index.listing("a", enforced=False, filters=Filters(), now_ms=0, limit=1,
                          after=decode_cursor(after) if after else None)
    nxt = encode_cursor(found.next_key) if found.next_key is not None else None
    return [e.interrupt_id for e in found.items], nxt


def test_an_interrupt_is_dated_when_its_run_ends_and_keeps_that_date_while_open() -> None:
    opened = interrupted_at("tx", "x", timedelta(seconds=3))
    assert [o.opened_at for o in opened.open_interrupts] == [NOW + timedelta(seconds=3)]
    again = rejected_later(opened, timedelta(seconds=20))
    assert [o.opened_at for o in again.open_interrupts] == [NOW + timedelta(seconds=3)]
    assert decode(ThreadState, wire.state(again)) == again


def test_a_cursor_walk_across_two_instances_sees_every_interrupt_once() -> None:
    x = interrupted_at("tx", "x", timedelta(seconds=0))
    y = interrupted_at("ty", "y", timedelta(seconds=10))
    x_again = rejected_later(x, timedelta(seconds=20))  # x still open, updatedAt 20 s later
    assert [o.interrupt.id for o in x_again.open_interrupts] == ["x"]

    watched = InterruptIndex()  # instance A: read every record as it came
    for s in (x, y, x_again):
        watched.apply(s.thread_id, wire.state(s))
    restored = InterruptIndex()  # instance B: restored the latest states from its store
    for s in (y, x_again):
        restored.apply(s.thread_id, wire.state(s))

    first, cursor = page(watched, None)  # page 1 from instance A
    assert cursor is not None
    second, _ = page(restored, cursor)  # page 2 from instance B (the same walk)
    assert sorted(first + second) == ["x", "y"], (first, second)
    assert page(watched, None)[0] == page(restored, None)[0] == ["y"]
