"""One run, start to end: the agent driven under the AG-UI 1.0 run guarantees.

``Runner.run()`` opens the run with its own ``RUN_STARTED`` (protocolVersion
"1.0", the input echoed) followed by any warnings (CUSTOM
``agui-relay.warning``), drives the agent in a task of its own, and passes
every event through four gates before it reaches the sink:

1. validation against the ``ag-ui-protocol`` models (a failure ends the run
   with ``RUN_ERROR`` ``invalid_event``; nothing invalid is published);
2. its size: a record that would not fit ends the run ``event_too_large``
   (``sizes``; so do an interrupt outcome or a terminal event too large,
   and a send that fails anyway ends it with a RUN_ERROR, not an exception);
3. the run's bookkeeping (``RunBook.admit``: lifecycle checks, chunk
   expansion; a violation ends the run with ``RUN_ERROR``);
4. numbering: each record gets the next per-run sequence number.

The agent's task only *admits* events onto a queue; the run's own task
publishes them, so cancelling the agent can never tear an event in half. ``cancel()``
stops admission, cancels the agent (it stops at its next await), waits a
grace period for it and abandons it if it ignores the cancellation; queued
events are still published, then everything open is closed and the run
finishes ``cancelled``. However the agent ends, ``RunBook.finish`` decides
the single terminal event, which goes to ``RunSink.send_terminal``.

A run whose input leaves interrupts uncovered under policy ``reject`` is
refused before it starts: its stream is one ``RUN_ERROR``
(``uncovered_interrupts``), as the seed allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

import orjson
from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TokenUsage,
)
from pydantic import ValidationError

from contracts.codec import EVENT_DECODER, to_wire, validation_detail
from services.producer.agent import AgentDefinition, AgentItem
from services.producer.bookkeeping import Cancelled, Completed, Ending, Failed, RunBook, Terminal
from services.producer.context import WARNING_EVENT, RunContext
from services.producer.effects import Effect, EffectLedger
from services.producer.errors import (
    AgentProtocolError,
    EffectUnavailableError,
    RunAborted,
    RunFailedError,
)
from services.producer.resume import ResumePlan
from services.producer.sink import EventRecord, RunOptions, RunReport, RunSink, UncoveredPolicy
from services.producer.sizes import limited_ending, send_failure
from services.producer.wire import plain_wire
from services.runtime.logging import run_fields

log = logging.getLogger(__name__)

__all__ = ["EFFECT_EVENT", "EventRecord", "RunOptions", "RunReport", "RunSink", "Runner",
           "UncoveredPolicy"]

EFFECT_EVENT = "agui-relay.effect"
"""CUSTOM event after each ``ctx.effect``: ``{"key", "status"}`` (``performed`` = it ran)."""


class Runner:
    """Drives one agent through one run; implements the context's ``RunPort``."""

    def __init__(
        self,
        agent: AgentDefinition,
        run_input: RunAgentInput,
        plan: ResumePlan,
        sink: RunSink,
        *,
        options: RunOptions | None = None,
        ledger: EffectLedger | None = None,
        agent_name: str = "agent",
        request_id: str | None = None,
        input_wire: Any = None,
        principal: str | None = None,
    ) -> None:
        self.agent = agent
        self.request_id = request_id
        """The RunRequest this run was admitted from (named in its log lines)."""
        self.principal = principal
        """The tenant that asked for the run (child runs it starts carry it too)."""
        self._input = run_input
        self._input_wire = input_wire
        """``run_input``'s wire form when the caller has it (what RUN_STARTED echoes)."""
        self.plan = plan
        self.sink = sink
        self.options = options or RunOptions()
        self.ledger = ledger
        self.agent_name = agent_name
        self.book = RunBook(run_input.thread_id, run_input.run_id,
                            frontend_tools=[t.name for t in run_input.tools or ()],
                            carried=plan.uncovered)
        self._seq = 0
        self._queue: deque[EventRecord] = deque()
        self._wake = asyncio.Event()
        """Set when records are queued, the agent ended, or a stop was asked for."""
        self._space = asyncio.Event()
        self._space.set()
        self._stop_requested = False
        self._stopping = False
        self._cancel_requested = False
        self._violation: AgentProtocolError | None = None
        self._abort: Failed | None = None
        self._result: Any = None
        self._effects: set[asyncio.Future[Effect]] = set()
        self._log = run_fields(run_input.thread_id, run_input.run_id, request_id)
        self._room = self.options.limits.event_room(run_input.thread_id, run_input.run_id,
                                                    agent_name)
        """The most value bytes an event record of this run can have (``sizes``)."""

    # ---- RunPort (what RunContext calls) --------------------------------

    @property
    def input(self) -> RunAgentInput:
        return self._input

    @property
    def answers(self) -> Mapping[str, ResumeEntry]:
        return self.plan.answers

    @property
    def prior_interrupts(self) -> Mapping[str, Interrupt]:
        return self.plan.prior

    @property
    def uncovered(self) -> Sequence[Interrupt]:
        return self.plan.uncovered

    @property
    def cancelled(self) -> bool:
        return self._cancel_requested

    def now(self) -> datetime:
        return self.options.clock()

    def raise_interrupt(self, interrupt: Interrupt) -> Interrupt:
        return self.book.raise_interrupt(interrupt)

    def suspension_of(self, subagent_run_id: str) -> list[str] | None:
        return self.book.suspension_of(subagent_run_id)

    def pending_frontend_calls(self) -> list[str]:
        return self.book.pending_frontend_calls()

    def add_usage(self, usage: TokenUsage) -> None:
        self.book.add_usage(usage)

    def set_result(self, result: Any) -> None:
        self._result = result

    async def emit(self, event: BaseEvent) -> None:
        """Admit one agent event (validated, checked, numbered) for publishing."""
        await self._wait_for_space()
        try:
            self._admit(*self._checked(event))
        except AgentProtocolError as exc:
            self._refuse(exc)

    async def emit_wire(self, kind: type[BaseEvent], wire: dict[str, Any]) -> None:
        """Admit one event given as its wire dict: validated as ``kind``, published as is.

        The helpers' fast path: no model-to-JSON round trip for every streamed delta.
        """
        if self._stopping or not self._space.is_set():
            await self._wait_for_space()
        try:
            try:
                event = kind.__pydantic_validator__.validate_python(wire)
            except ValidationError as exc:
                raise AgentProtocolError(f"invalid event: {validation_detail(exc)}",
                                         code="invalid_event") from exc
            self._admit(event, wire)
        except AgentProtocolError as exc:
            self._refuse(exc)

    async def _wait_for_space(self) -> None:
        while not self._space.is_set() and not self._stopping:
            await self._space.wait()
        if self._stopping:
            raise RunAborted("the run is no longer taking events")

    def _refuse(self, exc: AgentProtocolError) -> NoReturn:
        self._violation = exc
        self._stopping = True
        self._space.set()
        self._request_stop()
        raise RunAborted(exc.message) from exc

    async def effect(self, key: str, action: Callable[[], Awaitable[Any]]) -> Effect:
        ledger = self.ledger
        if ledger is None:
            raise EffectUnavailableError("this run has no effect ledger")
        prior = await ledger.begin(self._input.thread_id, key, self._input.run_id)
        if prior is not None:
            log.warning("effect %s already recorded (%s); not repeated", key, prior.status,
                        extra=self._log)
            await self.emit(CustomEvent(name=EFFECT_EVENT,
                                        value={"key": key, "status": prior.status}))
            return prior

        async def perform() -> Effect:
            result = await action()
            await ledger.complete(self._input.thread_id, key, result)
            return Effect("performed", result)

        task = asyncio.ensure_future(perform())
        self._effects.add(task)
        task.add_done_callback(self._effects.discard)
        effect = await asyncio.shield(task)
        await self.emit(CustomEvent(name=EFFECT_EVENT, value={"key": key, "status": effect.status}))
        return effect

    # ---- control ---------------------------------------------------------

    def cancel(self) -> None:
        """Stop the run: the agent is cancelled and the run finishes ``cancelled``."""
        if not self._cancel_requested:
            self._cancel_requested = True
            self._request_stop()

    def abort(self, message: str, code: str) -> None:
        """Stop the run as failed (e.g. the worker is going away): it ends with RUN_ERROR."""
        if self._abort is None:
            self._abort = Failed(message, code)
            self._request_stop()

    def _request_stop(self) -> None:
        self._stop_requested = True
        self._wake.set()

    # ---- the run ------------------------------------------------------------

    async def run(self) -> RunReport:
        """Run the agent to exactly one terminal event; returns how it ended."""
        if self.plan.uncovered and self.options.uncovered_policy == "reject":
            return await self._refuse_uncovered()
        self._enqueue(self._as_record(self._run_started(), "RUN_STARTED"))
        for warning in self.plan.warnings:
            log.warning("%s: %s %s", warning.code, warning.message,
                        ",".join(warning.interrupt_ids), extra=self._log)
            self._publishable(CustomEvent(name=WARNING_EVENT, value=warning.wire()))
        agent_task = asyncio.create_task(self._drive())
        agent_task.add_done_callback(lambda _: self._wake.set())
        try:
            ending = limited_ending(await self._publish_to_end(agent_task), self.book,
                                    self.options.limits)
        except Exception as exc:  # a send failed: end with RUN_ERROR, if that can be sent
            agent_task.cancel()
            agent_task.add_done_callback(_swallow)
            log.error("a record of run %s could not be sent", self._input.run_id, exc_info=exc,
                      extra=self._log)
            ending = send_failure(exc)
        except BaseException:
            agent_task.cancel()
            raise
        return await self._close(self.book.finish(ending))

    async def _publish_to_end(self, agent_task: asyncio.Task[Ending]) -> Ending:
        """Publish what the agent admits until it ends (or is stopped); how it ended."""
        await self._publish_until_stopped(agent_task)
        ending = await self._await_agent(agent_task)
        self._stopping = True
        self._space.set()
        await self._publish_queued()
        await self._settle_effects()
        return ending

    async def _publish_until_stopped(self, agent_task: asyncio.Task[Ending]) -> None:
        """Publish what the agent admits, in order, until it ends or a stop is asked for."""
        while True:
            await self._publish_queued()
            if agent_task.done() or self._stop_requested:
                return
            self._wake.clear()
            if not self._queue and not agent_task.done() and not self._stop_requested:
                await self._wake.wait()

    async def _publish_queued(self) -> None:
        queue = self._queue
        low = self.options.queue_limit // 2
        while queue:
            await self.sink.send(queue.popleft())
            if len(queue) < low:
                self._space.set()

    async def _await_agent(self, agent_task: asyncio.Task[Ending]) -> Ending:
        if not agent_task.done():
            self._stopping = True
            self._space.set()
            agent_task.cancel()
            await asyncio.wait({agent_task}, timeout=self.options.cancel_grace_s)
            if not agent_task.done():
                log.warning("agent %s ignored cancellation for %.1fs; abandoned",
                            self.agent_name, self.options.cancel_grace_s, extra=self._log)
                agent_task.add_done_callback(_swallow)
                return self._stopped_ending()
        return self._ending_of(agent_task)

    def _stopped_ending(self) -> Ending:
        if self._abort is not None:
            return self._abort
        if self._violation is not None:
            return Failed(self._violation.message, self._violation.code)
        return Cancelled()

    def _ending_of(self, task: asyncio.Task[Ending]) -> Ending:
        if self._abort is not None and (task.cancelled() or task.exception() is not None):
            return self._abort
        if self._violation is not None:
            return Failed(self._violation.message, self._violation.code)
        if task.cancelled():
            return Cancelled()
        exc = task.exception()
        if exc is None:
            return task.result()
        if isinstance(exc, RunAborted):
            return Cancelled()
        if isinstance(exc, AgentProtocolError | RunFailedError):
            return Failed(exc.message, exc.code)
        if self._cancel_requested and isinstance(exc, asyncio.CancelledError):
            return Cancelled()
        log.error("agent %s failed", self.agent_name, exc_info=exc, extra=self._log)
        return Failed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                      "agent_error")

    async def _drive(self) -> Ending:
        """The agent's task: call it, take what it yields, say how it wants to end."""
        out: Any = self.agent.run(self._input, RunContext(self))
        if inspect.isawaitable(out):
            out = await out
        if out is not None and hasattr(out, "__aiter__"):
            stream: AsyncIterator[AgentItem] = out
            try:
                async for item in stream:
                    ending = await self._take(item)
                    if ending is not None:
                        return ending
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
        elif out is not None and self._result is None:
            self._result = out
        return Completed(self._result)

    async def _take(self, item: AgentItem) -> Ending | None:
        """One yielded item: an event to publish, or the agent's own ending."""
        event = self._validated(item)
        if isinstance(event, RunStartedEvent):
            log.warning("agent %s yielded RUN_STARTED; the runtime opens runs, dropped",
                        self.agent_name, extra=self._log)
            return None
        if isinstance(event, RunErrorEvent):
            for usage in event.usage or ():
                self.book.add_usage(usage)
            return Failed(event.message, event.code)
        if isinstance(event, RunFinishedEvent):
            return self._agent_finish(event)
        await self.emit(event)
        return None

    def _agent_finish(self, event: RunFinishedEvent) -> Ending:
        for usage in event.usage or ():
            self.book.add_usage(usage)
        outcome = event.outcome
        if isinstance(outcome, RunFinishedCancelledOutcome):
            return Cancelled()
        if isinstance(outcome, RunFinishedInterruptOutcome):
            for interrupt in outcome.interrupts:
                self.book.raise_interrupt(interrupt)
        elif isinstance(outcome, RunFinishedSuccessOutcome) and outcome.model_extra:
            raise AgentProtocolError(
                f"success outcome carries {sorted(outcome.model_extra)}: a success "
                "outcome is closed (use the interrupt outcome to ask for input)")
        return Completed(event.result if event.result is not None else self._result)

    # ---- records --------------------------------------------------------------

    @staticmethod
    def _checked(item: AgentItem | BaseEvent) -> tuple[BaseEvent, dict[str, Any]]:
        """Validate one event against the ag-ui-protocol models; returns it and its wire form."""
        try:
            wire: dict[str, Any] = (dict(item) if isinstance(item, dict)
                                    else item.model_dump(mode="json", by_alias=True))
            event: BaseEvent = EVENT_DECODER.validate_python(wire)
        except ValidationError as exc:
            raise AgentProtocolError(f"invalid event: {validation_detail(exc)}",
                                     code="invalid_event") from exc
        except (ValueError, TypeError, AttributeError) as exc:
            raise AgentProtocolError(f"not a valid AG-UI event ({type(item).__name__}): {exc}",
                                     code="invalid_event") from exc
        return event, wire

    @staticmethod
    def _validated_as(kind: type[BaseEvent], wire: dict[str, Any]) -> dict[str, Any]:
        """Validate ``wire`` as a ``kind`` event; returns it (``AgentProtocolError`` if not)."""
        try:
            kind.__pydantic_validator__.validate_python(wire)
        except ValidationError as exc:
            raise AgentProtocolError(f"invalid event: {validation_detail(exc)}",
                                     code="invalid_event") from exc
        return wire

    def _validated(self, item: AgentItem) -> BaseEvent:
        return self._checked(item)[0]

    def _admit(self, event: BaseEvent, wire: dict[str, Any]) -> None:
        """Size, bookkeeping, then numbered records on the queue (``wire`` is ``event``'s).

        An event whose record would not fit is refused before the bookkeeping counts
        it: the run ends ``event_too_large``, closing only what was published open.
        """
        value = self._value(wire)
        if len(value) > self._room:
            raise AgentProtocolError(self.options.limits.event_refusal(
                event.type.value, len(value), self._room), code="event_too_large")
        for out in self.book.admit(event):
            self._enqueue(self._as_record(value, event.type.value) if out is event
                          else self._record(out))
        if len(self._queue) >= self.options.queue_limit:
            self._space.clear()

    def _run_started(self) -> bytes:
        """RUN_STARTED's bytes, the input echoed: built from the input, which was
        validated when it was read (so no model of it is built and checked again).
        Without the echo when that would not fit a record (the input is optional)."""
        run_input = self._input
        wire: dict[str, Any] = {"type": "RUN_STARTED", "threadId": run_input.thread_id,
                                "runId": run_input.run_id, "protocolVersion": PROTOCOL_VERSION}
        if run_input.parent_run_id is not None:
            wire["parentRunId"] = run_input.parent_run_id
        wire["input"] = self._input_wire if self._input_wire is not None else to_wire(run_input)
        value = self._value(wire)
        if len(value) > self._room:
            log.warning("RUN_STARTED sent without the input echo (%d bytes)", len(value),
                        extra=self._log)
            del wire["input"]
            value = orjson.dumps(wire)
        return value

    def _enqueue(self, record: EventRecord) -> None:
        self._queue.append(record)
        self._wake.set()

    def _record(self, event: BaseEvent, wire: dict[str, Any] | None = None) -> EventRecord:
        """Number one event and fix its bytes (validating it unless ``wire`` already was).

        A runtime-built event (closing, terminal) has its wire assembled from its parts
        when they are plain (``wire.plain_wire``) and that is validated; else it takes
        the agents' path (serialise, then validate).
        """
        if wire is None:
            plain = plain_wire(event)
            if plain is None:
                event, wire = self._checked(event)
            else:
                wire = self._validated_as(type(event), plain)
        kind = wire["type"]
        return self._as_record(self._value(wire), kind if type(kind) is str
                               else event.type.value)

    def _value(self, wire: dict[str, Any]) -> bytes:
        """``wire`` (timestamped if it has no timestamp) as bytes."""
        if wire.get("timestamp") is None:
            wire["timestamp"] = self.options.clock_ms()
        return orjson.dumps(wire)

    def _as_record(self, value: bytes, kind: str) -> EventRecord:
        """The next record: ``value`` numbered."""
        record = EventRecord(self._seq, value, kind)
        self._seq += 1
        return record

    def _publishable(self, event: BaseEvent, wire: dict[str, Any] | None = None) -> None:
        self._enqueue(self._record(event, wire))

    async def _settle_effects(self) -> None:
        if self._effects:
            await asyncio.wait(set(self._effects), timeout=max(self.options.cancel_grace_s, 5.0))

    async def _close(self, terminal: Terminal) -> RunReport:
        for event in terminal.closing:
            await self.sink.send(self._record(event))
        seq = self._seq
        try:
            record = self._record(terminal.event)
            report = RunReport(terminal.outcome, record, terminal.open_interrupts, self._seq)
            refused = (self.sink.refusal(report) if len(record.value) <= self._room
                       else Failed(self.options.limits.event_refusal(
                           record.event_type, len(record.value), self._room), "event_too_large"))
            if refused is not None:  # too large, or the checkpoint recording it would be
                raise AgentProtocolError(refused.message, refused.code or "event_too_large")
        except AgentProtocolError as exc:  # e.g. a result that is not JSON
            log.error("terminal event refused: %s", exc.message, extra=self._log)
            terminal = Terminal((), RunErrorEvent(message=exc.message, code=exc.code), "error",
                                tuple(self.plan.uncovered))
            self._seq = seq
            record = self._record(terminal.event)
            report = RunReport(terminal.outcome, record, terminal.open_interrupts, self._seq)
        await self.sink.send_terminal(record, report)
        log.info("run %s ended %s after %d events", self._input.run_id, terminal.outcome,
                 self._seq, extra=self._log)
        return report

    async def _refuse_uncovered(self) -> RunReport:
        ids = [i.id for i in self.plan.uncovered]
        message = ("interrupts still open on this thread have no resume entry: "
                   f"{', '.join(ids)}; answer or cancel each one")
        log.warning("refused: %s", message, extra=self._log)
        self.book.finish(Failed(message, "uncovered_interrupts"))
        record = self._record(RunErrorEvent(message=message, code="uncovered_interrupts"))
        report = RunReport("error", record, tuple(self.plan.prior.values()), self._seq)
        await self.sink.send_terminal(record, report)
        return report


def _swallow(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned agent task's exception so it is not reported as lost."""
    if not task.cancelled():
        task.exception()
