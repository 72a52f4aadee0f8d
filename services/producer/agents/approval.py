"""The ``approval`` agent: proposes ``delete_files``, runs it only when approved.

First run: an assistant message, a ``delete_files`` tool call (paths from
``forwardedProps.paths``, else two demo paths), and one interrupt (reason
``tool_approval``, its ``toolCallId``, a ``responseSchema`` for
``{"approved": boolean}``); the run ends interrupted.

Resuming run: it opens with a ``MESSAGES_SNAPSHOT`` restating the history
(so the tool result below answers a call the stream has shown), then for
each answered approval executes the tool only when resolved with
``approved: true`` — through ``ctx.effect`` keyed by the interrupt id, so
the execution happens at most once per approval whatever crashes — and
reports a refusal otherwise; it finishes success.

Who may approve: ``forwardedProps.approvers`` on the first run is kept in
the interrupt's ``metadata.approvers``: each a tenant (any of its keys may
approve) or one person, a tenant's named key (``tenant-a#alice``, the API
key ``token=tenant-a#alice``). An approval then counts only when
``ctx.answered_by`` (who the gatekeeper recorded, not anything the resuming
client says) is one of them or a key of one of them, else it is refused
like a rejection, naming who answered: with ``["tenant-a#alice"]``,
``tenant-a#bob`` is refused though his key opens tenant a's thread. An approval the expiry
policy cancelled (``policy:expiry``) is a refusal too: nothing runs.

Nothing is deleted: the "execution" is recorded. Each one appends a JSON
line to the file named by ``AGUI_APPROVAL_LEDGER`` (when set) and is logged,
and the run emits a CUSTOM ``agui-relay.effect`` event, so tests can count
executions per approval. ``forwardedProps.executionDelayMs`` on the
resuming input makes the execution take that long after it is recorded (a
window for fault tests to kill the worker in).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import orjson
from ag_ui.core import AssistantMessage, MessagesSnapshotEvent, ResumeEntry, RunAgentInput

from contracts.records import tenant_of
from services.producer.agent import agent_definition
from services.producer.context import RunContext
from services.producer.resume import APPROVAL_REASON, gated_interrupt_id
from services.runtime.logging import run_fields

log = logging.getLogger(__name__)

TOOL = "delete_files"
DEMO_PATHS = ["/tmp/agui-demo/report-draft.txt", "/tmp/agui-demo/old-cache.bin"]
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
    "additionalProperties": False,
}
LEDGER_ENV = "AGUI_APPROVAL_LEDGER"


def approved(entry: ResumeEntry) -> bool:
    """True only for ``resolved`` with ``{"approved": true}``."""
    payload = entry.payload
    return (entry.status == "resolved" and isinstance(payload, dict)
            and payload.get("approved") is True)


def may_approve(approvers: list[Any], who: str | None) -> bool:
    """Whether ``who`` is one of ``approvers``, or a named key of a tenant among them."""
    return who is not None and (who in approvers or tenant_of(who) in approvers)


def call_arguments(run_input: RunAgentInput, tool_call_id: str) -> dict[str, Any]:
    """The arguments of ``tool_call_id`` as the history carries them."""
    for message in run_input.messages:
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls or ():
                if call.id == tool_call_id:
                    try:
                        args = orjson.loads(call.function.arguments)
                    except orjson.JSONDecodeError:
                        return {}
                    return args if isinstance(args, dict) else {}
    return {}


def record_execution(thread_id: str, run_id: str, interrupt_id: str, tool_call_id: str,
                     paths: list[str]) -> None:
    """The side effect: one ledger line per execution (and a log line)."""
    line = {"threadId": thread_id, "runId": run_id, "interruptId": interrupt_id,
            "toolCallId": tool_call_id, "paths": paths, "pid": os.getpid()}
    log.info("executing %s for %s: %s", TOOL, interrupt_id, paths,
             extra=run_fields(thread_id, run_id))
    target = os.environ.get(LEDGER_ENV)
    if target:
        with Path(target).open("ab") as ledger:
            ledger.write(orjson.dumps(line) + b"\n")


async def propose(run_input: RunAgentInput, ctx: RunContext) -> None:
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    paths = props.get("paths") or DEMO_PATHS
    message_id = await ctx.text(f"I would like to delete {len(paths)} file(s): "
                                f"{', '.join(map(str, paths))}.")
    call_id = await ctx.tool_call(TOOL, {"paths": paths}, parent_message_id=message_id)
    approvers = props.get("approvers")
    named = ([str(a) for a in approvers] if isinstance(approvers, list) and approvers
             else None)
    ctx.interrupt(APPROVAL_REASON, id=gated_interrupt_id(call_id), tool_call_id=call_id,
                  message=f"Delete {len(paths)} file(s)?", response_schema=RESPONSE_SCHEMA,
                  metadata={"approvers": named} if named else None)


def refusal(ctx: RunContext, interrupt_id: str, entry: ResumeEntry) -> dict[str, Any] | None:
    """Why an answer is not an approval to act on (None: it is one)."""
    who = ctx.answered_by.get(interrupt_id)
    if not approved(entry):
        return {"refused": True, "status": entry.status, **({"by": who} if who else {})}
    metadata = ctx.prior_interrupts[interrupt_id].metadata or {}
    approvers = metadata.get("approvers")
    if isinstance(approvers, list) and not may_approve(approvers, who):
        return {"refused": True, "status": entry.status, "by": who, "reason": "not an approver"}
    return None


async def conclude(run_input: RunAgentInput, ctx: RunContext,
                   answered: list[tuple[str, str, ResumeEntry]]) -> None:
    await ctx.emit(MessagesSnapshotEvent(messages=run_input.messages))
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    delay = props.get("executionDelayMs")
    delay_ms = delay if isinstance(delay, int) and 0 < delay <= 600_000 else 0
    summary: dict[str, list[str]] = {"executed": [], "refused": []}
    for interrupt_id, call_id, entry in answered:
        paths = [str(p) for p in call_arguments(run_input, call_id).get("paths", [])]
        refused = refusal(ctx, interrupt_id, entry)
        if refused is not None:
            await ctx.tool_result(call_id, orjson.dumps(refused).decode())
            await ctx.text("Understood: nothing was deleted." if "reason" not in refused
                           else f"{refused['by']} may not approve this: nothing was deleted.")
            summary["refused"].append(interrupt_id)
            continue

        async def execute(iid: str = interrupt_id, cid: str = call_id,
                          targets: list[str] = paths) -> dict[str, Any]:
            record_execution(ctx.thread_id, ctx.run_id, iid, cid, targets)
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
            return {"deleted": targets}

        effect = await ctx.effect(interrupt_id, execute)
        if effect.status == "outcome_unknown":
            await ctx.tool_result(call_id, orjson.dumps(
                {"error": "an earlier attempt was interrupted; not repeated"}).decode())
            await ctx.text("An earlier attempt was cut short; I did not repeat it.")
        else:
            await ctx.tool_result(call_id, orjson.dumps(effect.result).decode())
            await ctx.text(f"Deleted {len(paths)} file(s).")
        summary["executed"].append(interrupt_id)
    ctx.finish(summary)


async def approval(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Propose delete_files behind an approval; execute it once approved."""
    answered = [
        (iid, interrupt.tool_call_id, entry)
        for iid, entry in ctx.answers.items()
        if (interrupt := ctx.prior_interrupts[iid]).reason == APPROVAL_REASON
        and interrupt.tool_call_id
    ]
    if answered:
        await conclude(run_input, ctx, answered)
    elif not ctx.uncovered:
        await propose(run_input, ctx)
    # else: an approval is still open and unanswered — do nothing; the runtime
    # carries it into this run's interrupt outcome again.


agent = agent_definition(approval, gated_tools=[TOOL])
