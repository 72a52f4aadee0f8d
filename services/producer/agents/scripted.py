"""The ``scripted`` agent: does exactly what ``forwardedProps.script`` says, for tests.

``{"interrupts": [Interrupt, ...], "text": str, "repeat": int, "delayMs": int,
"fail": str}``, every key optional. A run *without* resume entries streams
``text`` (``repeat`` times over, in one delta: a large event from a small
input) as one assistant message, waits ``delayMs`` (cancellable), then ends with the
interrupt outcome carrying exactly the given interrupts (ids, reasons,
expiresAt, subagentRunId as given), else ``RUN_ERROR`` code
``scripted_failure`` with ``fail`` as its message, else success. A run
*with* resume entries streams one assistant message listing each entry as
``<interruptId>=<status>`` (one per line, input order) and finishes success.
A script that does not parse ends the run with ``RUN_ERROR`` ``invalid_script``.

``"toolCalls": [{"id", "name", "arguments"}]`` makes the first run stream
those tool calls (after its text) for its interrupts to gate (their
``toolCallId``). A resume that approves one (resolved, payload
``{"approved": true}``) adds a second message, ``ran <name> with <JSON>``:
the arguments of the answer's ``arguments`` when it carries edited ones
(the inbox's edit-and-approve), else the call's own from the history.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from ag_ui.core import AssistantMessage, Interrupt, RunAgentInput
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.codec import validation_detail
from services.producer.agent import agent_definition
from services.producer.context import RunContext
from services.producer.errors import RunFailedError


class ScriptedCall(BaseModel):
    """A tool call the first run streams."""

    model_config = ConfigDict(extra="ignore")

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Script(BaseModel):
    """The script, read from ``forwardedProps.script`` (camelCase keys)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    interrupts: list[Interrupt] = Field(default_factory=list)
    text: str | None = None
    repeat: int = Field(1, ge=1, le=100_000_000)
    delay_ms: int = Field(0, alias="delayMs", ge=0, le=600_000)
    fail: str | None = None
    tool_calls: list[ScriptedCall] = Field(default_factory=list, alias="toolCalls")


def read_script(props: Any) -> Script:
    """The script in ``forwardedProps`` (an empty one when there is none)."""
    raw = props.get("script") if isinstance(props, dict) else None
    if raw is None:
        return Script()
    try:
        return Script.model_validate(raw)
    except ValidationError as exc:
        raise RunFailedError(f"invalid script: {validation_detail(exc)}",
                             code="invalid_script") from exc


async def scripted(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Follow forwardedProps.script: text, delay, then interrupts, failure or success."""
    if run_input.resume:
        await ctx.text("\n".join(f"{e.interrupt_id}={e.status}" for e in run_input.resume))
        ran = approved_calls(run_input, ctx)
        if ran:
            await ctx.text("\n".join(ran))
        return
    script = read_script(run_input.forwarded_props)
    if script.text:
        await ctx.text(script.text * script.repeat)
    for call in script.tool_calls:
        await ctx.tool_call(call.name, call.arguments, tool_call_id=call.id)
    if script.delay_ms:
        await asyncio.sleep(script.delay_ms / 1000)
    if script.interrupts:
        for interrupt in script.interrupts:
            ctx.raise_interrupt(interrupt)
    elif script.fail is not None:
        raise RunFailedError(script.fail, code="scripted_failure")


def approved_calls(run_input: RunAgentInput, ctx: RunContext) -> list[str]:
    """``ran <name> with <JSON>`` for each tool call an answer approves (its edited
    ``arguments`` when it has them, else the call's own from the history)."""
    calls = {call.id: call.function for message in run_input.messages
             if isinstance(message, AssistantMessage) for call in message.tool_calls or ()}
    lines = []
    for interrupt_id, entry in ctx.answers.items():
        call_id = ctx.prior_interrupts[interrupt_id].tool_call_id
        payload = entry.payload
        if (entry.status != "resolved" or call_id is None or not isinstance(payload, dict)
                or payload.get("approved") is not True):
            continue
        function = calls.get(call_id)
        arguments = payload.get("arguments")
        if arguments is None and function is not None:
            try:
                arguments = orjson.loads(function.arguments or "{}")
            except orjson.JSONDecodeError:
                arguments = function.arguments
        name = function.name if function is not None else call_id
        lines.append(f"ran {name} with {orjson.dumps(arguments).decode()}")
    return lines


agent = agent_definition(scripted)
