"""What a resumed pipeline parent reads of its earlier children — pure.

Found by probing: a resumed fan-out ran every child that had already finished a
second time (only a key with an open interrupt found its earlier child thread), and a
child question whose carried-up id would be over AGUI_MAX_ID_LENGTH failed the parent
with ``invalid_interrupt``, leaving the question open on the child for ever.
"""

from __future__ import annotations

import pytest
from ag_ui.core import Interrupt

from contracts.limits import InputLimits
from services.producer.delegation import (
    CHILD_METADATA,
    ChildCall,
    ChildHistory,
    ChildOutcome,
    EventOffset,
    carry_up,
    earlier_calls,
    uncarried,
)
from services.producer.errors import RunFailedError

pytestmark = pytest.mark.unit


def asked(*ids: str) -> ChildOutcome:
    return ChildOutcome("scripted", "t1/c0-00ff", "r1/c0-1", "interrupt",
                        [Interrupt(id=i, reason="confirm") for i in ids],
                        start=EventOffset(1, 40))


def test_the_first_carried_interrupt_names_the_other_children_called() -> None:
    calls = {"c1": ChildCall("t1/c1-11aa", "r1/c1-2", EventOffset(0, 7)),
             "c2": ChildCall("t1/c2-22bb", "r1/c2-3")}
    first, second = carry_up("c0", asked("q", "p"), calls=calls)
    named = (first.metadata or {})[CHILD_METADATA]
    assert named["from"] == {"partition": 1, "offset": 40}
    assert named["calls"] == {
        "c1": {"threadId": "t1/c1-11aa", "runId": "r1/c1-2",
               "from": {"partition": 0, "offset": 7}},
        "c2": {"threadId": "t1/c2-22bb", "runId": "r1/c2-3"}}
    assert "calls" not in (second.metadata or {})[CHILD_METADATA]  # named once, not per id


def test_a_resume_finds_every_child_the_earlier_run_named() -> None:
    (carried,) = carry_up("c0", asked("q"), calls={
        "c1": ChildCall("t1/c1-11aa", "r1/c1-2", EventOffset(0, 7)),
        "c2": ChildCall("someone-else/c2-22bb", "r1/c2-3"),  # not this thread's: not followed
        "c3": ChildCall("t1/c1-11aa", "r1/c1-2")})  # another key's thread: not followed
    found = earlier_calls("t1", {carried.id: carried})
    assert found == {"c0": ChildCall("t1/c0-00ff", "r1/c0-1", EventOffset(1, 40)),
                     "c1": ChildCall("t1/c1-11aa", "r1/c1-2", EventOffset(0, 7))}


@pytest.mark.parametrize("wire", [None, [1, 2], {"partition": 0}, {"partition": -1, "offset": 3},
                                  {"partition": True, "offset": 3}, {"partition": 0,
                                                                     "offset": "3"}])
def test_an_unreadable_start_is_read_from_the_beginning(wire: object) -> None:
    assert EventOffset.read(wire) is None


def test_a_child_history_knows_the_run_begun_after_the_one_that_asked() -> None:
    history = ChildHistory()
    for run, kind, offset in [("a", "RUN_STARTED", 3), ("a", "RUN_FINISHED", 4),
                              ("b", "RUN_STARTED", 9)]:
        history.add(run, {"type": kind}, EventOffset(0, offset))
    assert history.start == EventOffset(0, 3)
    assert (history.after("a"), history.ended("b"), history.last_ended()) == ("b", False, "a")
    history.add("b", {"type": "RUN_ERROR"}, EventOffset(0, 12))
    assert (history.ended("b"), history.last_ended(), history.after("b")) == (True, "b", None)
    assert history.after("unknown") is None


def test_a_question_too_long_to_carry_up_fails_the_parent_naming_it() -> None:
    limits = InputLimits(max_id_length=20)
    assert uncarried("c0", asked("q" * 17), limits) is None  # "c0/" + 17 = 20
    why = uncarried("c0", asked("ok", "q" * 18), limits)
    assert why is not None
    assert "q" * 18 in why
    assert "21" in why
    with pytest.raises(RunFailedError) as caught:
        carry_up("c0", asked("q" * 18), limits)
    assert caught.value.code == "child_id_too_long"
