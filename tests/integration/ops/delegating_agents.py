"""Agents that delegate, for ``test_ops_child_cancel.py`` (hosted by a worker process)."""

from __future__ import annotations

import asyncio

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
