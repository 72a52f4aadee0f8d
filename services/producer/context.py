"""The run context: what an agent reads and the helpers it writes a run with.

An agent receives its ``RunAgentInput`` and a ``RunContext``. Every helper
emits well-formed ``ag-ui-protocol`` events through the runtime, which
validates, numbers and publishes them and keeps the run's guarantees
(everything closed, one terminal event). A sketch::

    async def agent(input: RunAgentInput, ctx: RunContext) -> None:
        entry = ctx.answers.get("approve-1")
        if entry is None:
            await ctx.text("I would like to delete two files.")
            call = await ctx.tool_call("delete_files", {"paths": ["a", "b"]})
            ctx.interrupt("tool_approval", id="approve-1", tool_call_id=call,
                          response_schema={"type": "object"})
            return                      # the run ends with the interrupt outcome
        async with ctx.subagent("executor") as sub:
            await sub.text("Deleting.")

Attribution is explicit: ``ctx.subagent(name)`` yields a context whose
helpers tag every event (and interrupt) with that invocation's
``subagentRunId``; leaving the block emits ``SUBAGENT_FINISHED`` —
``suspended`` with its interrupt ids when it interrupted, success otherwise —
or ``SUBAGENT_ERROR`` when the block raised.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Protocol

import orjson
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from contracts.records import PRINCIPAL_KEY
from services.producer.effects import Effect
from services.producer.ttl import iso_instant

WARNING_EVENT = "agui-relay.warning"
"""The CUSTOM event name runtime warnings travel under."""


class RunPort(Protocol):
    """The runner side of a context (implemented by ``services.producer.runner``)."""

    @property
    def input(self) -> RunAgentInput: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def principal(self) -> str | None: ...
    @property
    def answers(self) -> Mapping[str, ResumeEntry]: ...
    @property
    def prior_interrupts(self) -> Mapping[str, Interrupt]: ...
    @property
    def uncovered(self) -> Sequence[Interrupt]: ...
    @property
    def cancelled(self) -> bool: ...
    async def emit(self, event: BaseEvent) -> None: ...
    async def emit_wire(self, kind: type[BaseEvent], wire: dict[str, Any]) -> None: ...
    def raise_interrupt(self, interrupt: Interrupt) -> Interrupt: ...
    def suspension_of(self, subagent_run_id: str) -> list[str] | None: ...
    def pending_frontend_calls(self) -> list[str]: ...
    def add_usage(self, usage: TokenUsage) -> None: ...
    def set_result(self, result: Any) -> None: ...
    def now(self) -> datetime: ...
    async def effect(self, key: str, action: Callable[[], Awaitable[Any]]) -> Effect: ...


def answerer_of(entry: ResumeEntry, principal: str | None) -> str | None:
    """Who answered ``entry``: its ``agui-relay.principal`` metadata, else ``principal``."""
    who = (entry.metadata or {}).get(PRINCIPAL_KEY)
    return who if isinstance(who, str) else principal


def tagged(wire: dict[str, Any], subagent_run_id: str | None) -> dict[str, Any]:
    """``wire`` attributed to ``subagent_run_id`` (unchanged for the parent agent)."""
    if subagent_run_id is not None:
        wire["subagentRunId"] = subagent_run_id
    return wire


def new_id(prefix: str) -> str:
    """A fresh id for a message, tool call or subagent invocation (64 random bits)."""
    return f"{prefix}-{os.urandom(8).hex()}"


class MessageStream:
    """One assistant text message streamed in parts (``ctx.start_message()``)."""

    def __init__(self, port: RunPort, message_id: str, subagent_run_id: str | None) -> None:
        self._port = port
        self.message_id = message_id
        self._tag = subagent_run_id
        self._ended = False

    async def write(self, delta: str) -> None:
        """Append ``delta`` to the message."""
        await self._port.emit_wire(TextMessageContentEvent, tagged(
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": self.message_id, "delta": delta},
            self._tag))

    async def end(self) -> None:
        """Close the message (idempotent)."""
        if not self._ended:
            self._ended = True
            await self._port.emit_wire(TextMessageEndEvent, tagged(
                {"type": "TEXT_MESSAGE_END", "messageId": self.message_id}, self._tag))

    async def __aenter__(self) -> MessageStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.end()


class RunContext:
    """What an agent reads about its run, and the helpers it emits events with."""

    def __init__(self, port: RunPort, subagent_run_id: str | None = None) -> None:
        self._port = port
        self.subagent_run_id = subagent_run_id
        """The invocation this context attributes events to (None: the parent agent)."""
        self._subagent_result: Any = None

    # ---- what the agent reads -----------------------------------------

    @property
    def input(self) -> RunAgentInput:
        """The run's input, as the consumer sent it."""
        return self._port.input

    @property
    def thread_id(self) -> str:
        return self._port.input.thread_id

    @property
    def run_id(self) -> str:
        return self._port.input.run_id

    @property
    def forwarded_props(self) -> Any:
        return self._port.input.forwarded_props

    @property
    def request_id(self) -> str | None:
        """The admitted request this run came from (a server-made id no client chooses)."""
        return self._port.request_id

    @property
    def principal(self) -> str | None:
        """The tenant that asked for this run (None with API keys off)."""
        return self._port.principal

    @property
    def answers(self) -> Mapping[str, ResumeEntry]:
        """Resume entries by interrupt id — only those answering interrupts this
        runtime raised on the thread (unrecognised entries are dropped with a warning)."""
        return self._port.answers

    @property
    def answered_by(self) -> Mapping[str, str]:
        """Who answered each interrupt in ``answers``, by interrupt id: the principal
        the consumer service authenticated (the API key's tenant, ``tenant#name`` for a
        key with a name, e.g. ``tenant-a#alice``; ``anonymous`` with authentication
        off) or ``policy:expiry`` when the expiry policy cancelled it.

        The gatekeeper writes it into each admitted resume entry's metadata
        (``agui-relay.principal``), replacing whatever a client put there; an entry
        without it counts as the run's ``principal``'s. Refuse an approval from the
        wrong person by checking it before acting on a ``resolved`` answer.
        """
        return {interrupt_id: who for interrupt_id, entry in self._port.answers.items()
                if (who := answerer_of(entry, self._port.principal)) is not None}

    @property
    def prior_interrupts(self) -> Mapping[str, Interrupt]:
        """The interrupts that were open on the thread when this run started."""
        return self._port.prior_interrupts

    @property
    def uncovered(self) -> Sequence[Interrupt]:
        """Open interrupts no entry answers: never act on them; the runtime
        carries them into this run's interrupt outcome (or refused the run)."""
        return self._port.uncovered

    @property
    def pending_frontend_tools(self) -> list[str]:
        """Calls of the application's tools (``input.tools``) started in this run
        without a result: the run ends success with them as ``pendingToolCallIds``."""
        return self._port.pending_frontend_calls()

    @property
    def cancelled(self) -> bool:
        """True once the run was told to stop (the agent is cancelled at its next await)."""
        return self._port.cancelled

    def now(self) -> datetime:
        """The runtime's clock (aware, UTC)."""
        return self._port.now()

    # ---- events --------------------------------------------------------

    async def emit(self, event: BaseEvent) -> None:
        """Emit any ``ag-ui-protocol`` event (validated and checked before publishing)."""
        await self._port.emit(event)

    def start_message(self, *, message_id: str | None = None) -> _MessageOpener:
        """Open an assistant message streamed in parts.

        Either ``async with ctx.start_message() as m: await m.write("..")`` (closed
        on exit) or ``m = await ctx.start_message()`` ... ``await m.end()``.
        """
        return _MessageOpener(self._port, message_id or new_id("msg"), self.subagent_run_id)

    async def text(self, content: str, *, message_id: str | None = None) -> str:
        """Stream ``content`` as one assistant message; returns its message id."""
        async with self.start_message(message_id=message_id) as message:
            if content:
                await message.write(content)
        return message.message_id

    async def tool_call(
        self,
        name: str,
        args: Mapping[str, Any] | str,
        *,
        tool_call_id: str | None = None,
        parent_message_id: str | None = None,
    ) -> str:
        """Emit a complete tool call (start, arguments, end); returns its id.

        A call of a tool listed in ``input.tools`` is the application's to run:
        leave it unanswered and the run ends success with it pending.
        """
        call_id = tool_call_id or new_id("call")
        text = args if isinstance(args, str) else orjson.dumps(dict(args)).decode()
        tag = self.subagent_run_id
        start: dict[str, Any] = {"type": "TOOL_CALL_START", "toolCallId": call_id,
                                 "toolCallName": name}
        if parent_message_id is not None:
            start["parentMessageId"] = parent_message_id
        await self._port.emit_wire(ToolCallStartEvent, tagged(start, tag))
        await self._port.emit_wire(ToolCallArgsEvent, tagged(
            {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": text}, tag))
        await self._port.emit_wire(ToolCallEndEvent, tagged(
            {"type": "TOOL_CALL_END", "toolCallId": call_id}, tag))
        return call_id

    async def tool_result(self, tool_call_id: str, content: str, *,
                          message_id: str | None = None) -> str:
        """Answer an agent-side tool call; returns the tool message id."""
        mid = message_id or new_id("tool")
        await self._port.emit_wire(ToolCallResultEvent, tagged(
            {"type": "TOOL_CALL_RESULT", "messageId": mid, "toolCallId": tool_call_id,
             "content": content, "role": "tool"}, self.subagent_run_id))
        return mid

    @asynccontextmanager
    async def step(self, name: str) -> AsyncIterator[None]:
        """A named step: STEP_STARTED on entry, STEP_FINISHED on exit."""
        await self._port.emit(StepStartedEvent(step_name=name,
                                               subagent_run_id=self.subagent_run_id))
        yield
        await self._port.emit(StepFinishedEvent(step_name=name,
                                                subagent_run_id=self.subagent_run_id))

    async def state_snapshot(self, snapshot: Any) -> None:
        """Replace the run's state."""
        await self._port.emit(StateSnapshotEvent(snapshot=snapshot,
                                                 subagent_run_id=self.subagent_run_id))

    async def state_delta(self, operations: Sequence[Mapping[str, Any]]) -> None:
        """Patch the run's state with RFC 6902 operations."""
        await self._port.emit(StateDeltaEvent.model_validate(
            {"delta": [dict(op) for op in operations],
             **({"subagentRunId": self.subagent_run_id} if self.subagent_run_id else {})}))

    async def warn(self, code: str, message: str) -> None:
        """Surface a warning to the consumer (CUSTOM ``agui-relay.warning``)."""
        await self._port.emit(CustomEvent(name=WARNING_EVENT,
                                          value={"code": code, "message": message},
                                          subagent_run_id=self.subagent_run_id))

    # ---- outcome -------------------------------------------------------

    def interrupt(
        self,
        reason: str,
        *,
        message: str | None = None,
        tool_call_id: str | None = None,
        response_schema: Mapping[str, Any] | None = None,
        expires_at: datetime | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
    ) -> Interrupt:
        """Ask for outside input: the run will end with the interrupt outcome.

        Nothing is emitted now; the agent usually returns soon after. Raising
        the same interrupt twice is harmless; another interrupt under a taken
        id is an ``InterruptConflictError``. Inside a subagent the interrupt
        carries its ``subagentRunId``.
        """
        when = iso_instant(expires_at) if isinstance(expires_at, datetime) else expires_at
        return self._port.raise_interrupt(Interrupt(
            id=id or new_id("int"), reason=reason, message=message, tool_call_id=tool_call_id,
            response_schema=dict(response_schema) if response_schema is not None else None,
            expires_at=when, metadata=dict(metadata) if metadata is not None else None,
            subagent_run_id=self.subagent_run_id))

    def raise_interrupt(self, interrupt: Interrupt) -> Interrupt:
        """Raise a ready-made ``Interrupt`` exactly as given (its own attribution kept)."""
        return self._port.raise_interrupt(interrupt)

    def usage(self, usage: TokenUsage) -> None:
        """Report one model call's token usage (the run reports only its own calls)."""
        self._port.add_usage(usage)

    def finish(self, result: Any = None) -> None:
        """Set the result: the run's (reported on a success outcome), or inside a
        subagent block that invocation's (reported on its SUBAGENT_FINISHED)."""
        if self.subagent_run_id is None:
            self._port.set_result(result)
        else:
            self._subagent_result = result

    async def effect(self, key: str, action: Callable[[], Awaitable[Any]]) -> Effect:
        """Run ``action`` at most once per (thread, key), recorded durably; see ``effects``."""
        return await self._port.effect(key, action)

    @asynccontextmanager
    async def subagent(
        self,
        name: str,
        *,
        subagent_run_id: str | None = None,
        description: str | None = None,
        parent_tool_call_id: str | None = None,
    ) -> AsyncIterator[RunContext]:
        """A subagent invocation; pass ``subagent_run_id`` to continue a suspended one."""
        sid = subagent_run_id or new_id("sub")
        await self._port.emit(SubagentStartedEvent(
            subagent_run_id=sid, name=name, description=description,
            parent_subagent_run_id=self.subagent_run_id,
            parent_tool_call_id=parent_tool_call_id))
        child = RunContext(self._port, sid)
        try:
            yield child
        except Exception as exc:
            await self._port.emit(SubagentErrorEvent(subagent_run_id=sid, message=str(exc) or
                                                     type(exc).__name__, code="subagent_error"))
            raise
        suspended = self._port.suspension_of(sid)
        if suspended is None:
            outcome: SubagentFinishedSuccessOutcome | SubagentFinishedSuspendedOutcome = (
                SubagentFinishedSuccessOutcome())
        else:
            outcome = SubagentFinishedSuspendedOutcome(interrupt_ids=suspended or None)
        await self._port.emit(SubagentFinishedEvent(
            subagent_run_id=sid, outcome=outcome,
            result=child._subagent_result if suspended is None else None))


class _MessageOpener:
    """``async with ctx.start_message() as m`` — emits START on entry, END on exit."""

    def __init__(self, port: RunPort, message_id: str, tag: str | None) -> None:
        self._stream = MessageStream(port, message_id, tag)
        self._port = port
        self._tag = tag

    async def __aenter__(self) -> MessageStream:
        await self._port.emit_wire(TextMessageStartEvent, tagged(
            {"type": "TEXT_MESSAGE_START", "messageId": self._stream.message_id,
             "role": "assistant"}, self._tag))
        return self._stream

    def __await__(self) -> Generator[Any, None, MessageStream]:
        return self.__aenter__().__await__()

    async def __aexit__(self, *exc: object) -> None:
        await self._stream.end()
