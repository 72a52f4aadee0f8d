"""One run, start to end: the agent driven under the AG-UI 1.0 run guarantees.

``Runner.run()`` opens the run with its own ``RUN_STARTED`` (protocolVersion
"1.0", the input echoed) followed by any warnings (CUSTOM
``agui-relay.warning``), drives the agent in a task of its own, and passes
every event through four gates before it reaches the sink:

1. validation against the ``ag-ui-protocol`` models (a failure ends the run
   with ``RUN_ERROR`` ``invalid_event``; nothing invalid is published);
2. its size: a record that would not fit ends the run ``event_too_large``
   (``sizes``; so do an interrupt outcome or a terminal event too large,
   and a send that fails anyway ends it with a RUN_ERROR, not an exception),
   and a ``RUN_FINISHED`` nested past ``AGUI_MAX_JSON_DEPTH`` ends it
   ``invalid_event`` (the gatekeeper would record such an end as a failure);
3. the run's bookkeeping (``RunBook.admit``: lifecycle checks, chunk
   expansion; a violation ends the run with ``RUN_ERROR``);
4. numbering: each record gets the next per-run sequence number.

The gates live in the context's port (``services.producer.port``) and the
run's records (``services.producer.records``); this module is the driver.
The agent's task only *admits* events onto the port's queue; the run's own
task publishes them, so cancelling the agent can never tear an event in
half. ``cancel()`` stops admission, cancels the agent (it stops at its next
await), waits a grace period for it and abandons it if it ignores the
cancellation; queued events are still published, then everything open is
closed and the run finishes ``cancelled``. However the agent ends,
``RunBook.finish`` decides the single terminal event, which goes to
``RunSink.send_terminal``.

A run whose input leaves interrupts uncovered under policy ``reject`` is
refused before it starts: its stream is one ``RUN_ERROR``
(``uncovered_interrupts``), as the seed allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
)

from contracts.limits import outcome_limits
from services.producer.agent import AgentDefinition, AgentItem
from services.producer.bookkeeping import Cancelled, Completed, Ending, Failed, RunBook, Terminal
from services.producer.context import WARNING_EVENT, RunContext
from services.producer.effects import EffectLedger
from services.producer.errors import (
    AgentProtocolError,
    RecordTooLargeError,
    RunAborted,
    RunFailedError,
)
from services.producer.port import EFFECT_EVENT, AgentPort
from services.producer.records import RunRecords, checked
from services.producer.resume import ResumePlan
from services.producer.sink import EventRecord, RunOptions, RunReport, RunSink, UncoveredPolicy
from services.producer.sizes import limited_ending, send_failure
from services.producer.ttl import deadline
from services.runtime.logging import run_fields

log = logging.getLogger(__name__)

__all__ = ["EFFECT_EVENT", "EventRecord", "RunOptions", "RunReport", "RunSink", "Runner",
           "UncoveredPolicy"]


class Runner:
    """Drives one agent through one run, publishing what its port admits."""

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
        self._input = run_input
        self._input_wire = input_wire
        """``run_input``'s wire form when the caller has it (what RUN_STARTED echoes)."""
        self.plan = plan
        self.sink = sink
        self.options = options or RunOptions()
        self.agent_name = agent_name
        self.book = RunBook(run_input.thread_id, run_input.run_id,
                            frontend_tools=[t.name for t in run_input.tools or ()],
                            carried=plan.uncovered)
        self._log = run_fields(run_input.thread_id, run_input.run_id, request_id)
        self.records = RunRecords(self.options.clock_ms, self.options.limits.event_room(
            run_input.thread_id, run_input.run_id, agent_name), self._log)
        self.port = AgentPort(run_input, plan, self.book, self.records, self.options,
                              ledger=ledger, request_id=request_id, principal=principal,
                              log_fields=self._log)
        """What the agent's context calls (and where its events wait to be published)."""
        self._abort: Failed | None = None

    @property
    def input(self) -> RunAgentInput:
        return self._input

    @property
    def request_id(self) -> str | None:
        """The RunRequest this run was admitted from (named in its log lines)."""
        return self.port.request_id

    # ---- control ---------------------------------------------------------

    def cancel(self) -> None:
        """Stop the run: the agent is cancelled and the run finishes ``cancelled``."""
        if not self.port.cancel_requested:
            self.port.cancel_requested = True
            self.port.request_stop()

    def abort(self, message: str, code: str) -> None:
        """Stop the run as failed (e.g. the worker is going away): it ends with RUN_ERROR."""
        if self._abort is None:
            self._abort = Failed(message, code)
            self.port.request_stop()

    # ---- the run ------------------------------------------------------------

    async def run(self) -> RunReport:
        """Run the agent to exactly one terminal event; returns how it ended."""
        if self.plan.uncovered and self.options.uncovered_policy == "reject":
            return await self._refuse_uncovered()
        port = self.port
        port.enqueue(self.records.run_started(self._input, self._input_wire))
        for warning in self.plan.warnings:
            log.warning("%s: %s %s", warning.code, warning.message,
                        ",".join(warning.interrupt_ids), extra=self._log)
            port.enqueue(self.records.record(CustomEvent(name=WARNING_EVENT,
                                                         value=warning.wire())))
        agent_task = asyncio.create_task(self._drive())
        agent_task.add_done_callback(lambda _: port.wake.set())
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
        ttl = self.options.interrupt_ttl
        if ttl is not None:
            self.book.stamp_expiry(deadline(self.options.clock(), ttl))
        return await self._close(self.book.finish(ending))

    async def _publish_to_end(self, agent_task: asyncio.Task[Ending]) -> Ending:
        """Publish what the agent admits until it ends (or is stopped); how it ended."""
        await self._publish_until_stopped(agent_task)
        ending = await self._await_agent(agent_task)
        self.port.stop_taking()
        await self._publish_queued()
        await self._settle_effects()
        return ending

    async def _publish_until_stopped(self, agent_task: asyncio.Task[Ending]) -> None:
        """Publish what the agent admits, in order, until it ends or a stop is asked for."""
        port = self.port
        while True:
            await self._publish_queued()
            if agent_task.done() or port.stop_requested:
                return
            port.wake.clear()
            if not port.queue and not agent_task.done() and not port.stop_requested:
                await port.wake.wait()

    async def _publish_queued(self) -> None:
        port = self.port
        queue = port.queue
        low = self.options.queue_limit // 2
        while queue:
            await self.sink.send(queue.popleft())
            if len(queue) < low:
                port.space.set()

    async def _await_agent(self, agent_task: asyncio.Task[Ending]) -> Ending:
        if not agent_task.done():
            self.port.stop_taking()
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
        violation = self.port.violation
        if violation is not None:
            return Failed(violation.message, violation.code)
        return Cancelled()

    def _ending_of(self, task: asyncio.Task[Ending]) -> Ending:
        # retrieved first, whatever decides the ending: an agent a refused event stopped
        # raised RunAborted, which the loop would otherwise log as never retrieved
        exc = None if task.cancelled() else task.exception()
        if self._abort is not None and (task.cancelled() or exc is not None):
            return self._abort
        violation = self.port.violation
        if violation is not None:
            return Failed(violation.message, violation.code)
        if task.cancelled():
            return Cancelled()
        if exc is None:
            return task.result()
        if isinstance(exc, RunAborted):
            return Cancelled()
        if isinstance(exc, AgentProtocolError | RunFailedError):
            return Failed(exc.message, exc.code)
        if self.port.cancel_requested and isinstance(exc, asyncio.CancelledError):
            return Cancelled()
        log.error("agent %s failed", self.agent_name, exc_info=exc, extra=self._log)
        return Failed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                      "agent_error")

    async def _drive(self) -> Ending:
        """The agent's task: call it, take what it yields, say how it wants to end."""
        out: Any = self.agent.run(self._input, RunContext(self.port))
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
        elif out is not None and self.port.result is None:
            self.port.result = out
        return Completed(self.port.result)

    async def _take(self, item: AgentItem) -> Ending | None:
        """One yielded item: an event to publish, or the agent's own ending."""
        event: BaseEvent = checked(item)[0]
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
        await self.port.emit(event)
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
        return Completed(event.result if event.result is not None else self.port.result)

    # ---- the end ----------------------------------------------------------------

    async def _settle_effects(self) -> None:
        effects = self.port.effects
        if effects:
            await asyncio.wait(set(effects), timeout=max(self.options.cancel_grace_s, 5.0))

    async def _close(self, terminal: Terminal) -> RunReport:
        records = self.records
        for event in terminal.closing:
            await self.sink.send(records.record(event))
        seq = records.seq
        try:
            record = records.record(terminal.event)
            report = RunReport(terminal.outcome, record, terminal.open_interrupts, records.seq)
            refused = self._refusal(record, report)
            if refused is not None:
                raise AgentProtocolError(refused.message, refused.code or "event_too_large")
        except AgentProtocolError as exc:  # e.g. a result that is not JSON
            log.error("terminal event refused: %s", exc.message, extra=self._log)
            terminal, record, report = self._error_end(exc.message, exc.code, seq)
        try:
            await self.sink.send_terminal(record, report)
        except RecordTooLargeError as exc:  # the broker refused a record of the run: say
            # so in a RUN_ERROR (if the broker refuses that too, the worker cannot report it)
            log.error("run %s cannot end as it would: %s", self._input.run_id, exc.message,
                      extra=self._log)
            terminal, record, report = self._error_end(exc.message, exc.code, seq)
            await self.sink.send_terminal(record, report)
        if isinstance(terminal.event, RunErrorEvent):  # the log says why, not only the stream
            log.info("run %s ended error after %d events: %s: %s", self._input.run_id,
                     records.seq, terminal.event.code, terminal.event.message, extra=self._log)
        else:
            log.info("run %s ended %s after %d events", self._input.run_id, terminal.outcome,
                     records.seq, extra=self._log)
        return report

    def _error_end(self, message: str, code: str | None,
                   seq: int) -> tuple[Terminal, EventRecord, RunReport]:
        """A RUN_ERROR ending the run instead of a terminal event it cannot end with,
        numbered as that one was (``seq``: the records before it)."""
        terminal = Terminal((), RunErrorEvent(message=message, code=code), "error",
                            tuple(self.plan.uncovered))
        self.records.seq = seq
        record = self.records.record(terminal.event)
        return terminal, record, RunReport(terminal.outcome, record, terminal.open_interrupts,
                                           self.records.seq)

    def _refusal(self, record: EventRecord, report: RunReport) -> Failed | None:
        """Why the run cannot end with ``record``: a record too large; a ``RUN_FINISHED``
        breaking a limit the gatekeeper holds every run's end to (``outcome_limits``: it
        would record the run failed, its interrupts not open, while the client saw them
        raised); or a checkpoint too large to record the end."""
        limits = self.options.limits
        room = self.records.room
        if len(record.value) > room:
            return Failed(limits.event_refusal(record.event_type, len(record.value), room),
                          "event_too_large")
        if record.event_type == "RUN_FINISHED":
            broken = outcome_limits(record.value, limits.ids)
            if broken is not None:
                return Failed(f"the run's RUN_FINISHED: {broken.detail}", "invalid_event")
        return self.sink.refusal(report)

    async def _refuse_uncovered(self) -> RunReport:
        ids = [i.id for i in self.plan.uncovered]
        message = ("interrupts still open on this thread have no resume entry: "
                   f"{', '.join(ids)}; answer or cancel each one")
        log.warning("refused: %s", message, extra=self._log)
        self.book.finish(Failed(message, "uncovered_interrupts"))
        record = self.records.record(RunErrorEvent(message=message, code="uncovered_interrupts"))
        report = RunReport("error", record, tuple(self.plan.prior.values()), self.records.seq)
        await self.sink.send_terminal(record, report)
        return report


def _swallow(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned agent task's exception so it is not reported as lost."""
    if not task.cancelled():
        task.exception()
