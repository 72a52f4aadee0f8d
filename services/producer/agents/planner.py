"""The ``planner`` agent: a parent delegating to two subagents, one needing approval.

First run: the parent announces a plan; subagent ``researcher`` reports its
findings and completes; subagent ``executor`` asks for approval of the plan
with an ``expiresAt`` (``forwardedProps.approvalTtlSeconds``, default 600 s
from now) and is left ``suspended``; the run ends with the interrupt outcome,
the interrupt attributed to the executor's ``subagentRunId``.

Resuming run: the executor is continued under the *same* ``subagentRunId``
(the interrupt says which), carries out or drops the plan as answered, and
completes; the parent sums up and the run finishes success.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ag_ui.core import RunAgentInput

from services.producer.agent import agent_definition
from services.producer.context import RunContext

REASON = "plan_approval"
DEFAULT_TTL_S = 600
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}
PLAN = ["collect stale cache entries", "archive them", "purge the originals"]


def ttl_seconds(props: Any) -> float:
    value = props.get("approvalTtlSeconds") if isinstance(props, dict) else None
    return float(value) if isinstance(value, int | float) and value > 0 else DEFAULT_TTL_S


async def first_run(run_input: RunAgentInput, ctx: RunContext) -> None:
    await ctx.text("Plan: research what is stale, then execute after your approval.")
    async with ctx.subagent("researcher", description="finds stale entries") as researcher:
        await researcher.text("Found 3 stale cache entries (1.2 GB).")
        researcher.finish({"stale": 3})
    async with ctx.subagent("executor", description="runs the plan") as executor:
        await executor.text("Ready to run: " + "; ".join(PLAN) + ".")
        expires = ctx.now() + timedelta(seconds=ttl_seconds(run_input.forwarded_props))
        executor.interrupt(REASON, message="Run the 3-step cleanup plan?",
                           response_schema=RESPONSE_SCHEMA, expires_at=expires,
                           metadata={"steps": PLAN})


async def planner(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Delegate research and (approved) execution to two subagents."""
    answered = [(ctx.prior_interrupts[i], e) for i, e in ctx.answers.items()
                if ctx.prior_interrupts[i].reason == REASON]
    if not answered:
        if not ctx.uncovered:
            await first_run(run_input, ctx)
        return
    outcomes = []
    for interrupt, entry in answered:
        go = (entry.status == "resolved" and isinstance(entry.payload, dict)
              and entry.payload.get("approved") is True)
        async with ctx.subagent("executor", subagent_run_id=interrupt.subagent_run_id,
                                description="runs the plan") as executor:
            if go:
                for step in PLAN:
                    async with executor.step(step):
                        await executor.text(f"Done: {step}.")
            else:
                await executor.text("Plan dropped: " + ("declined." if entry.status == "resolved"
                                                         else "the approval was cancelled."))
            executor.finish({"executed": go})
        outcomes.append(go)
    await ctx.text("All done." if all(outcomes) else "Nothing was changed.")
    ctx.finish({"executed": all(outcomes)})


agent = agent_definition(planner)
