"""plan_resume: which entries are answers, which are strangers, what stays uncovered."""

from __future__ import annotations

import pytest
from ag_ui.core import AssistantMessage, FunctionCall, Interrupt, ToolCall, ToolMessage, UserMessage
from producer_support import cancelled, make_input, resolved

from services.producer.resume import gated_interrupt_id, pending_gated_calls, plan_resume

pytestmark = pytest.mark.unit

A = Interrupt(id="a", reason="approval")
B = Interrupt(id="b", reason="approval", tool_call_id="call-b")


def history(*, answered: bool = False) -> list[object]:
    messages: list[object] = [
        UserMessage(id="u", content="clean up"),
        AssistantMessage(id="m", tool_calls=[
            ToolCall(id="call-x", function=FunctionCall(name="delete_files", arguments="{}")),
            ToolCall(id="call-y", function=FunctionCall(name="search", arguments="{}"))]),
    ]
    if answered:
        messages.append(ToolMessage(id="t", tool_call_id="call-x", content="done"))
    return messages


def test_entries_for_raised_interrupts_are_answers_in_input_order() -> None:
    plan = plan_resume(make_input(resume=[cancelled("b"), resolved("a", {"ok": 1})]), [A, B])
    assert list(plan.answers) == ["b", "a"]
    assert plan.uncovered == ()
    assert plan.warnings == ()
    assert set(plan.prior) == {"a", "b"}


def test_unknown_and_duplicate_entries_are_warned_about_not_used() -> None:
    plan = plan_resume(make_input(resume=[resolved("a", 1), resolved("a", 2), resolved("zz")]),
                       [A])
    assert plan.answers["a"].payload == 1
    codes = {w.code: w.interrupt_ids for w in plan.warnings}
    assert codes == {"unknown_resume_entry": ("zz",), "duplicate_resume_entry": ("a",)}


def test_resume_on_a_thread_with_nothing_open_is_all_unrecognised() -> None:
    plan = plan_resume(make_input(resume=[resolved("a")]), [])
    assert plan.answers == {}
    assert [w.code for w in plan.warnings] == ["unknown_resume_entry"]


def test_open_interrupts_without_entries_are_uncovered_and_reported() -> None:
    plan = plan_resume(make_input(resume=[resolved("a")]), [A, B],
                       dispatch_warnings=["forwarded leniently"])
    assert plan.uncovered == (B,)
    assert [w.code for w in plan.warnings] == ["dispatch_warning", "uncovered_interrupts"]


def test_gated_call_without_result_or_entry_is_uncovered_even_without_a_checkpoint() -> None:
    run_input = make_input(messages=history())
    assert pending_gated_calls(run_input, ["delete_files"]) == [("call-x", "delete_files")]
    plan = plan_resume(run_input, [], gated_tools=["delete_files"])
    assert [i.id for i in plan.uncovered] == [gated_interrupt_id("call-x")]
    assert plan.uncovered[0].tool_call_id == "call-x"


def test_gated_call_answered_by_its_deterministic_id_is_covered() -> None:
    plan = plan_resume(make_input(messages=history(), resume=[resolved("approve:call-x")]), [],
                       gated_tools=["delete_files"])
    assert list(plan.answers) == ["approve:call-x"]
    assert plan.uncovered == ()


def test_gated_call_with_a_result_or_a_known_interrupt_needs_no_stand_in() -> None:
    assert plan_resume(make_input(messages=history(answered=True)), [],
                       gated_tools=["delete_files"]).uncovered == ()
    known = Interrupt(id="mine", reason="tool_approval", tool_call_id="call-x")
    plan = plan_resume(make_input(messages=history(), resume=[resolved("mine")]), [known],
                       gated_tools=["delete_files"])
    assert plan.uncovered == ()
    assert list(plan.prior) == ["mine"]
