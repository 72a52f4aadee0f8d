"""``pipeline_child``: the reviewer in the two-agent pipeline example.

Run as a child of ``pipeline_parent`` (through ``requests``, in its own
worker). It reviews the task it was given and asks for a sign-off — an
interrupt with a ``responseSchema`` and, when the parent forwards one
(``forwardedProps.expiresAt``), a deadline; ``forwardedProps.delayMs`` makes
the review take that long (to show cancellation reaching the child). Resumed, it reports the
decision: signed off, refused, or cancelled (how an expired sign-off is
moved past), and finishes with that as its result.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ag_ui.core import RunAgentInput

from services.producer.agent import agent_definition
from services.producer.context import RunContext

SIGN_OFF = "sign-off"
SIGN_OFF_SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
                   "required": ["approved"]}


def _task(run_input: RunAgentInput) -> str:
    for message in reversed(run_input.messages):
        if message.role == "user" and isinstance(message.content, str):
            return message.content
    return "the task"


async def review(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Review a task and ask for a sign-off before approving it."""
    answer = ctx.answers.get(SIGN_OFF)
    if answer is None:
        props: dict[str, Any] = (run_input.forwarded_props
                                 if isinstance(run_input.forwarded_props, dict) else {})
        if isinstance(props.get("delayMs"), int):  # a slow review (cancellable)
            await asyncio.sleep(props["delayMs"] / 1000)
        await ctx.text(f"Reviewed {_task(run_input)}: ready to publish once signed off.")
        ctx.interrupt("sign_off", id=SIGN_OFF, message="Sign off the publication?",
                      response_schema=SIGN_OFF_SCHEMA, expires_at=props.get("expiresAt"))
        return
    if answer.status == "cancelled":
        await ctx.text("Sign-off cancelled: nothing published.")
        ctx.finish({"published": False, "signOff": "cancelled"})
        return
    approved = isinstance(answer.payload, dict) and answer.payload.get("approved") is True
    await ctx.text("Signed off: published." if approved else "Sign-off refused: not published.")
    ctx.finish({"published": approved, "signOff": "resolved"})


agent = agent_definition(review, description="Reviews a task and asks for a sign-off.")
