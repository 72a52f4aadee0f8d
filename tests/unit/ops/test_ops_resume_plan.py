"""Resume lists from operator flags: every refusal the gatekeeper would make, said early."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from ag_ui.core import Interrupt, ResumeEntry, RunAgentInput
from hypothesis import given
from hypothesis import strategies as st

from contracts import Decision, OpenInterrupt, RunRequest, ThreadState
from services.agui.expiry import is_expired
from services.cli.ops.resume_plan import (
    ResumeOptions,
    parse_resolve,
    plan_resume,
    schema_error,
)
from services.gatekeeper.rules import Policy, decide

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}},
            "required": ["approved"], "additionalProperties": False}


def thread(*interrupts: Interrupt, status: str = "interrupted") -> ThreadState:
    return ThreadState(thread_id="t1", status=status, run_id="r1",  # type: ignore[arg-type]
                       open_interrupts=[OpenInterrupt(run_id="r1", interrupt=i)
                                        for i in interrupts])


def intr(iid: str, expires_at: str | None = None, schema: dict[str, Any] | None = None
         ) -> Interrupt:
    return Interrupt(id=iid, reason="r", expires_at=expires_at, response_schema=schema)


FRESH = "2026-11-30T12:10:00Z"
STALE = "2026-11-30T11:00:00Z"


def codes(state: ThreadState, options: ResumeOptions) -> list[str]:
    return [p.code for p in plan_resume(state, options, NOW).problems]


def test_parse_resolve() -> None:
    assert parse_resolve('a=1') == ("a", 1)
    assert parse_resolve('ns/x={"approved": true}') == ("ns/x", {"approved": True})
    with pytest.raises(ValueError, match="not JSON"):
        parse_resolve("a=b=c")
    with pytest.raises(ValueError, match="ID=JSON"):
        parse_resolve("no-equals")
    with pytest.raises(ValueError, match="ID=JSON"):
        parse_resolve("=1")


def test_parse_resolve_takes_an_id_holding_equals_signs() -> None:
    """The answer starts after the first ``=`` at which the rest is JSON: a base64 id's
    padding (``YWJjZA==``) is part of the id, and an answer holding ``=`` in a string
    still ends the id at the first one."""
    assert parse_resolve('YWJjZA==={"approved": true}') == ("YWJjZA==", {"approved": True})
    assert parse_resolve("k==true") == ("k=", True)
    assert parse_resolve('a="x=1"') == ("a", "x=1")
    assert parse_resolve("a=b=1") == ("a=b", 1)
    with pytest.raises(ValueError, match="--resolve a: the answer is not JSON"):
        parse_resolve("a=b=c")


def test_full_cover_in_interrupt_order() -> None:
    state = thread(intr("a", schema=APPROVAL), intr("b"), intr("c", STALE))
    plan = plan_resume(state, ResumeOptions(resolve=[("b", "x"), ("a", {"approved": True})],
                                            cancel_expired=True), NOW)
    assert plan.ok
    assert [(e.interrupt_id, e.status, e.payload) for e in plan.entries] == [
        ("a", "resolved", {"approved": True}), ("b", "resolved", "x"), ("c", "cancelled", None)]


def test_cancel_all_covers_whatever_is_not_resolved() -> None:
    plan = plan_resume(thread(intr("a"), intr("b")),
                       ResumeOptions(resolve=[("a", 1)], cancel_all=True), NOW)
    assert [(e.interrupt_id, e.status) for e in plan.entries] == [("a", "resolved"),
                                                                  ("b", "cancelled")]


def test_uncovered_is_refused_with_the_flags_to_add() -> None:
    plan = plan_resume(thread(intr("a"), intr("b")), ResumeOptions(resolve=[("a", 1)]), NOW)
    (problem,) = plan.problems
    assert problem.code == "uncovered_interrupts"
    assert problem.interrupt_ids == ("b",)
    assert "--cancel=b" in problem.hint
    assert not plan.entries


def test_resolving_expired_is_refused_cancelling_it_admitted() -> None:
    state = thread(intr("a", STALE))
    assert codes(state, ResumeOptions(resolve=[("a", 1)])) == ["interrupt_expired"]
    assert codes(state, ResumeOptions(resolve=[("a", 1)], cancel_expired=True)) == [
        "interrupt_expired"]
    assert plan_resume(state, ResumeOptions(cancel=["a"]), NOW).ok


def test_the_expiry_instant_itself_is_expired() -> None:
    state = thread(intr("a", "2026-11-30T12:00:00.000Z"))
    assert codes(state, ResumeOptions(resolve=[("a", 1)])) == ["interrupt_expired"]


def test_unparseable_expiry_never_expires() -> None:
    assert plan_resume(thread(intr("a", "whenever")), ResumeOptions(resolve=[("a", 1)]), NOW).ok


def test_an_unparseable_expiry_is_reported_as_the_gatekeeper_warns() -> None:
    plan = plan_resume(thread(intr("a", "whenever")), ResumeOptions(resolve=[("a", 1)]), NOW)
    assert any("'whenever'" in w and "never expires" in w for w in plan.warnings)


def gatekeeper_says(state: ThreadState, entries: list[ResumeEntry]) -> Decision:
    """What the gatekeeper decides for a new run carrying ``entries``."""
    run_input = RunAgentInput(thread_id=state.thread_id, run_id="r-new", state=None,
                              messages=[], tools=[], context=[], forwarded_props=None,
                              resume=entries)
    request = RunRequest(request_id="q-new", agent="a", input=run_input, submitted_at=NOW,
                         principal=state.principal)
    return decide(state, request, NOW, Policy()).decision


def res(iid: str, payload: Any = 1) -> ResumeEntry:
    return ResumeEntry(interrupt_id=iid, status="resolved", payload=payload)


def can(iid: str) -> ResumeEntry:
    return ResumeEntry(interrupt_id=iid, status="cancelled")


@pytest.mark.parametrize(("state", "options", "sent", "hint"), [
    (thread(intr("a"), intr("b")), ResumeOptions(resolve=[("a", 1)]), [res("a")],
     "--cancel=b"),
    (thread(intr("a", STALE)), ResumeOptions(resolve=[("a", 1)]), [res("a")],
     "--cancel-expired"),
    (thread(intr("a")), ResumeOptions(resolve=[("a", 1)], cancel=["zz"]),
     [res("a"), can("zz")], "waiting on interrupt a"),
    (thread(intr("a")), ResumeOptions(resolve=[("a", 1)], cancel=["a"]),
     [res("a"), can("a")], "one --resolve or one --cancel"),
    (thread(intr("a"), status="running"), ResumeOptions(cancel_all=True), [can("a")],
     "`agui-relay cancel -- t1`"),
    (thread(status="idle"), ResumeOptions(cancel=["a"]), [can("a")], ""),
])
def test_each_refusal_is_the_gatekeepers_own_with_the_flags_to_change(
    state: ThreadState, options: ResumeOptions, sent: list[ResumeEntry], hint: str,
) -> None:
    said = gatekeeper_says(state, sent)
    assert said.verdict == "rejected"
    (problem,) = plan_resume(state, options, NOW).problems
    assert problem.code == said.code
    assert problem.interrupt_ids == tuple(said.interrupt_ids or ())
    assert problem.message.startswith(said.message)
    assert hint in f"{problem.message}; {problem.hint}"


def test_unknown_and_duplicate_ids() -> None:
    state = thread(intr("a"))
    assert codes(state, ResumeOptions(resolve=[("a", 1)], cancel=["zz"])) == ["unknown_interrupt"]
    assert codes(state, ResumeOptions(resolve=[("a", 1)], cancel=["a"])) == ["duplicate_entry"]
    assert codes(state, ResumeOptions(resolve=[("a", 1), ("a", 2)])) == ["duplicate_entry"]


def test_answer_checked_against_response_schema() -> None:
    state = thread(intr("a", schema=APPROVAL))
    plan = plan_resume(state, ResumeOptions(resolve=[("a", {"approved": "yes"})]), NOW)
    (problem,) = plan.problems
    assert problem.code == "invalid_payload"
    assert "approved" in problem.message
    assert codes(state, ResumeOptions(resolve=[("a", {})])) == ["invalid_payload"]
    assert codes(state, ResumeOptions(resolve=[("a", None)])) == ["invalid_payload"]


def test_broken_schema_warns_and_lets_the_answer_through() -> None:
    plan = plan_resume(thread(intr("a", schema={"type": 12})),
                       ResumeOptions(resolve=[("a", 1)]), NOW)
    assert plan.ok
    assert plan.warnings
    assert "not a valid JSON Schema" in plan.warnings[0]


def test_schema_error_direct() -> None:
    assert schema_error({"approved": True}, APPROVAL) == (None, None)
    assert schema_error(5, None) == (None, None)


def test_busy_and_idle_threads() -> None:
    assert codes(thread(intr("a"), status="running"), ResumeOptions(cancel_all=True)) == [
        "thread_busy"]
    assert codes(thread(status="idle"), ResumeOptions()) == ["not_interrupted"]
    assert codes(thread(status="idle"), ResumeOptions(cancel=["a"])) == ["unknown_interrupt"]


def test_a_child_thread_is_answered_at_its_parent_and_may_only_be_cancelled_here() -> None:
    child = thread(intr("sign-off")).model_copy(update={"thread_id": "t1/review-0a1b",
                                                        "parent_run_id": "top-r1"})
    plan = plan_resume(child, ResumeOptions(resolve=[("sign-off", 1)]), NOW)
    (problem,) = plan.problems
    assert problem.code == "answer_at_parent"
    assert "`agui-relay resume -- t1`" in problem.hint
    assert "--cancel-all" in problem.hint
    assert plan_resume(child, ResumeOptions(cancel_all=True), NOW).ok


def test_every_problem_is_reported_at_once() -> None:
    state = thread(intr("a", STALE), intr("b", schema=APPROVAL), intr("c"))
    found = set(codes(state, ResumeOptions(resolve=[("a", 1), ("b", 3)], cancel=["x"])))
    assert found == {"interrupt_expired", "invalid_payload", "unknown_interrupt",
                     "uncovered_interrupts"}


expiries = st.sampled_from([None, FRESH, STALE, "2026-11-30T12:00:00Z", "garbage"])
ids = st.sampled_from(["a", "b", "c", "d", "x"])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ThreadState, ResumeOptions]:
    opened = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4,
                           unique=True))
    state = thread(*(intr(i, draw(expiries)) for i in opened))
    options = ResumeOptions(
        resolve=draw(st.lists(st.tuples(ids, st.integers(0, 3)), max_size=4)),
        cancel=draw(st.lists(ids, max_size=3)),
        cancel_expired=draw(st.booleans()),
        cancel_all=draw(st.booleans()),
    )
    return state, options


@given(scenarios())
def test_property_a_plan_that_passes_covers_each_interrupt_exactly_once(
    scenario: tuple[ThreadState, ResumeOptions],
) -> None:
    state, options = scenario
    plan = plan_resume(state, options, NOW)
    if plan.ok:
        assert [e.interrupt_id for e in plan.entries] == [
            o.interrupt.id for o in state.open_interrupts]
        said = gatekeeper_says(state, plan.entries)  # and the gatekeeper admits it
        assert said.verdict == "admitted", said.message
    else:
        assert not plan.entries


@given(scenarios())
def test_property_never_resolves_an_expired_interrupt(
    scenario: tuple[ThreadState, ResumeOptions],
) -> None:
    state, options = scenario
    by_id = {o.interrupt.id: o.interrupt for o in state.open_interrupts}
    for entry in plan_resume(state, options, NOW).entries:
        if entry.status == "resolved":
            assert not is_expired(by_id[entry.interrupt_id].expires_at, NOW)


@given(scenarios())
def test_property_cancel_all_alone_always_passes(
    scenario: tuple[ThreadState, ResumeOptions],
) -> None:
    state, _ = scenario
    plan = plan_resume(state, ResumeOptions(cancel_all=True), NOW)
    assert plan.ok
    assert {e.status for e in plan.entries} == {"cancelled"}


def test_a_pattern_that_backtracks_exponentially_is_bounded_and_said_not_checked() -> None:
    """An agent's ``^(a|aa)+$`` against 40 a's and a "!" would hold the operator's terminal
    for minutes; it gets ``PATTERN_S`` and a warning, and plain patterns still decide."""
    schema = {"type": "object", "properties": {
        "word": {"type": "string", "pattern": "^(a|aa)+$"},
        "digits": {"type": "string", "pattern": "^[0-9]+$"}}}
    why, warning = schema_error({"word": "a" * 40 + "!", "digits": "42"}, schema)
    assert why is None
    assert warning is not None
    assert "'^(a|aa)+$' did not finish within 1 s" in warning
    why, warning = schema_error({"word": "aaa", "digits": "4x"}, schema)
    assert why == "at /digits: '4x' does not match '^[0-9]+$'"
    assert warning is None


def test_a_remote_ref_is_never_fetched_and_the_answer_said_not_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A schema is whatever a record says: jsonschema's default registry would GET the URL
    a ``$ref`` names from the operator's machine, with no timeout."""
    fetched: list[str] = []

    def urlopen(request: Any, *_: Any, **__: Any) -> Any:
        fetched.append(getattr(request, "full_url", str(request)))
        raise OSError("refused by the test")

    monkeypatch.setattr("urllib.request.urlopen", urlopen)
    for schema in ({"$ref": "http://127.0.0.1:9/x.json"},
                   {"type": "object", "properties": {"a": {"$ref": "other.json"}}},
                   {"$id": "http://example.invalid/s", "$ref": "t.json"}):
        why, warning = schema_error({"a": 1}, schema)
        assert why is None
        assert warning is not None
        assert warning.startswith("answer not checked against the schema: its $ref ")
        assert "fetches no schema" in warning
    assert fetched == []
    plan = plan_resume(thread(intr("a", schema={"$ref": "http://127.0.0.1:9/x.json"})),
                       ResumeOptions(resolve=[("a", {"a": 1})]), NOW)
    assert plan.ok
    assert plan.warnings == ["a: answer not checked against the schema: its $ref "
                             "'http://127.0.0.1:9/x.json' is not within it (agui-relay "
                             "resume fetches no schema)"]


def test_a_self_referencing_schema_is_said_not_checked_not_a_recursion_error() -> None:
    why, warning = schema_error({"a": 1}, {"$ref": "#"})
    assert why is None
    assert warning is not None
    assert "refers back to itself" in warning
    plan = plan_resume(thread(intr("a", schema={"$ref": "#"})),
                       ResumeOptions(resolve=[("a", 1)]), NOW)
    assert plan.ok
    assert len(plan.warnings) == 1


def test_local_refs_still_decide_and_a_missing_one_is_said_not_checked() -> None:
    schema = {"$defs": {"yes": {"type": "boolean"}}, "type": "object",
              "properties": {"approved": {"$ref": "#/$defs/yes"}}}
    assert schema_error({"approved": True}, schema) == (None, None)
    why, _ = schema_error({"approved": "y"}, schema)
    assert why == "at /approved: 'y' is not of type 'boolean'"
    for ref in ("#/$defs/no", "#nowhere"):
        why, warning = schema_error({"approved": "y"}, {"$ref": ref})
        assert why is None
        assert warning == ("answer not checked against the schema: its $ref "
                           f"{ref!r} is not within it (agui-relay resume fetches no schema)")
