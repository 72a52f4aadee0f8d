"""Agents that delegate, for ``test_ops_child_cancel.py`` and ``test_ops_fanout.py``
(hosted by a worker process)."""

from __future__ import annotations

import asyncio
from typing import Any

from ag_ui.core import RunAgentInput

from services.producer.context import RunContext
from services.producer.delegation import Delegation


async def never(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Starts and never ends (until cancelled)."""
    await ctx.text("working for ever")
    await asyncio.Event().wait()


async def impatient(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Delegates to ``never``, waiting 3 s for it (``Delegation.call(within_s=...)``)."""
    await Delegation(ctx).call("never", "h", within_s=3)


async def fanout(run_input: RunAgentInput, ctx: RunContext) -> None:
    """``forwardedProps.n`` children of ``scripted`` at once, in a TaskGroup; those listed in
    ``interrupting`` ask a question (id ``questionId``), carried up once all have ended."""
    props: dict[str, Any] = (run_input.forwarded_props
                             if isinstance(run_input.forwarded_props, dict) else {})
    n = int(props.get("n", 3))
    asking = set(props.get("interrupting", []))
    delegation = Delegation(ctx)

    def script_of(i: int) -> dict[str, Any]:
        if i in asking:
            return {"text": "asking", "interrupts": [{"id": props.get("questionId", "q"),
                                                      "reason": "confirm"}]}
        return {"text": "ok"}
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(delegation.call("scripted", f"c{i}",
                                                   forwarded_props={"script": script_of(i)}))
                 for i in range(n)]
    statuses: dict[str, int] = {}
    for i, task in enumerate(tasks):
        outcome = task.result()
        statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
        if outcome.status == "interrupt":
            delegation.carry_up(f"c{i}", outcome)
    if not any(t.result().status == "interrupt" for t in tasks):
        ctx.finish({"statuses": statuses, "childRuns": [t.result().run_id for t in tasks]})
