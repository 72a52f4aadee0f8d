"""Who answered: ``RunContext.answered_by`` from the dispatched entries, and an agent refusing
an approval from someone who may not give it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt, ResumeEntry
from producer_support import (
    assert_conformant,
    cancelled,
    make_input,
    outcome_of,
    resolved,
    resume_input,
    run_agent,
)

from contracts.records import EXPIRY_ANSWERER, PRINCIPAL_KEY
from services.producer.agents import approval
from services.producer.context import RunContext
from services.producer.effects import MemoryLedger

pytestmark = pytest.mark.unit


def by(entry: ResumeEntry, who: str) -> ResumeEntry:
    return entry.model_copy(update={"metadata": {PRINCIPAL_KEY: who}})


async def test_answered_by_names_each_entry_s_answerer_else_the_run_s_principal() -> None:
    seen: dict[str, str] = {}

    async def agent(inp: Any, ctx: RunContext) -> None:
        seen.update(ctx.answered_by)

    opened = [Interrupt(id="a", reason="r"), Interrupt(id="b", reason="r")]
    run_input = make_input(resume=[by(resolved("a"), "alice"), cancelled("b")])
    await run_agent(agent, run_input, open_interrupts=opened, principal="owner")
    assert seen == {"a": "alice", "b": "owner"}
    seen.clear()
    await run_agent(agent, make_input(resume=[cancelled("a")]), open_interrupts=opened[:1])
    assert seen == {}


@pytest.fixture
def ledger_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "executions.jsonl"
    monkeypatch.setenv(approval.LEDGER_ENV, str(path))
    return path


def executions(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


async def resumed_by(who: str, entry_of: Any, approvers: tuple[str, ...] = ("alice",)
                     ) -> tuple[list[dict[str, Any]], Any]:
    first = await run_agent(approval.agent, make_input(
        forwarded_props={"paths": ["/x"], "approvers": list(approvers)}))
    (wire,) = outcome_of(first)["interrupts"]
    assert wire["metadata"] == {"approvers": list(approvers)}
    interrupt = Interrupt.model_validate(wire)
    second = await run_agent(approval.agent, resume_input(first, "run-2", [
        by(entry_of(interrupt.id), who)]), open_interrupts=[interrupt], ledger=MemoryLedger())
    assert_conformant(second)
    result = next(w for w in second.wire if w["type"] == "TOOL_CALL_RESULT")
    return second.wire, orjson.loads(result["content"])


async def test_approval_from_an_approver_executes(ledger_file: Path) -> None:
    _, result = await resumed_by("alice", lambda i: resolved(i, {"approved": True}))
    assert result == {"deleted": ["/x"]}
    assert executions(ledger_file) == 1


async def test_approval_from_anyone_else_is_refused_naming_them(ledger_file: Path) -> None:
    wire, result = await resumed_by("mallory", lambda i: resolved(i, {"approved": True}))
    assert result == {"refused": True, "status": "resolved", "by": "mallory",
                      "reason": "not an approver"}
    assert any("mallory may not approve" in w.get("delta", "") for w in wire)
    assert executions(ledger_file) == 0


async def test_the_expiry_policy_s_cancellation_runs_the_refusal_path(ledger_file: Path) -> None:
    _, result = await resumed_by(EXPIRY_ANSWERER, cancelled)
    assert result == {"refused": True, "status": "cancelled", "by": EXPIRY_ANSWERER}
    assert executions(ledger_file) == 0


@pytest.mark.parametrize(
    ("approvers", "who", "allowed"),
    [
        (["tenant-a#alice"], "tenant-a#alice", True),
        (["tenant-a#alice"], "tenant-a#bob", False),  # the right tenant, the wrong person
        (["tenant-a#alice"], "tenant-a", False),  # the tenant's nameless key is not alice
        (["tenant-a"], "tenant-a#bob", True),  # a tenant names every key of it
        (["tenant-a"], "tenant-a", True),
        (["tenant-a"], "tenant-b#alice", False),
        (["tenant-b", "tenant-a#alice"], "tenant-a#alice", True),
        (["org:acme/eu"], "org:acme/eu#ci", True),
        (["org:acme"], "org:acme/eu#ci", False),
        (["tenant-a"], None, False),
    ],
)
def test_an_approver_is_a_tenant_or_one_named_key_of_it(
        approvers: list[str], who: str | None, allowed: bool) -> None:
    assert approval.may_approve(list(approvers), who) is allowed


async def test_the_wrong_person_of_the_right_tenant_is_refused(ledger_file: Path) -> None:
    only_alice = ("tenant-a#alice",)
    wire, refused = await resumed_by("tenant-a#bob", lambda i: resolved(i, {"approved": True}),
                                     only_alice)
    assert refused == {"refused": True, "status": "resolved", "by": "tenant-a#bob",
                       "reason": "not an approver"}
    assert any("tenant-a#bob may not approve" in w.get("delta", "") for w in wire)
    assert executions(ledger_file) == 0
    _, done = await resumed_by("tenant-a#alice", lambda i: resolved(i, {"approved": True}),
                               only_alice)
    assert done == {"deleted": ["/x"]}
    assert executions(ledger_file) == 1
