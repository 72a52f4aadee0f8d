"""``pipeline_parent``: the coordinator in the two-agent pipeline example.

It delegates the review of its task to the ``pipeline_child`` agent as a
child run — a separate run, decided by the gatekeeper and executed by the
child's own workers — and waits for its outcome. When the reviewer stops
for a sign-off, the coordinator ends its own run interrupted with that
interrupt carried up (id ``review/sign-off``, the child named in its
metadata), so the person answers once, at the top; its resumed run routes
the answer down to the reviewer and reports what came of it. Forward
``childExpiresAt`` to give the reviewer's sign-off a deadline and
``childDelayMs`` to slow the review down; cancelling the coordinator while it
waits cancels the reviewer's run too.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import RunAgentInput

from services.producer.agent import agent_definition
from services.producer.context import RunContext
from services.producer.delegation import Delegation

CHILD_AGENT = "pipeline_child"
KEY = "review"


def _task(run_input: RunAgentInput) -> str:
    for message in run_input.messages:
        if message.role == "user" and isinstance(message.content, str):
            return message.content
    return "the report"


async def coordinate(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Delegate the review to the reviewer agent; carry its questions up to the caller."""
    delegation = Delegation(ctx)
    props: dict[str, Any] = (run_input.forwarded_props
                             if isinstance(run_input.forwarded_props, dict) else {})
    resuming = bool(delegation.pending_answers(KEY))
    if not resuming:
        await ctx.text(f"Asking the reviewer to check {_task(run_input)}.")
    child_props = {name: props[key] for key, name in (("childExpiresAt", "expiresAt"),
                                                      ("childDelayMs", "delayMs"))
                   if props.get(key) is not None} or None
    outcome = await delegation.call(
        CHILD_AGENT, KEY,
        [{"id": f"{ctx.run_id}-task", "role": "user", "content": _task(run_input)}],
        forwarded_props=child_props)
    if outcome.status == "interrupt":
        await ctx.text("The reviewer is waiting for a sign-off: answer it here.")
        delegation.carry_up(KEY, outcome)
        return
    if outcome.status in ("error", "refused", "cancelled"):
        raise RuntimeError(f"the review run {outcome.run_id} ended {outcome.status}: "
                           f"{outcome.error or ''}".rstrip(": "))
    await ctx.text(f"Reviewer: {outcome.text}")
    ctx.finish({"review": outcome.result, "childRunId": outcome.run_id})


agent = agent_definition(coordinate, description="Delegates a review to pipeline_child.")
