"""The runtime side of a run's context: where an agent's events are admitted.

``RunContext`` (what an agent holds) calls a ``RunPort``; ``AgentPort`` is
that port for one run. It answers what the agent reads (input, resume
answers, prior interrupts, the clock) and *admits* what the agent emits:
each event is validated, measured (a record that would not fit ends the
run ``event_too_large``), passed through the run's bookkeeping
(``RunBook.admit``) and numbered (``RunRecords``), then queued. It never
publishes: the run driver (``services.producer.runner``) drains the queue
from its own task, so cancelling the agent can never tear an event in half.

Back-pressure: when ``queue_limit`` records wait, ``emit`` blocks until the
driver has drained half of them. A refused event records the violation,
stops admission and raises ``RunAborted`` into the agent; the driver turns
the violation into the run's ``RUN_ERROR``. ``ctx.effect`` runs through the
effect ledger here, shielded, so a cancelled run still records an effect
that already started.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    TokenUsage,
)

from services.producer.bookkeeping import RunBook
from services.producer.effects import Effect, EffectLedger
from services.producer.errors import AgentProtocolError, EffectUnavailableError, RunAborted
from services.producer.records import RunRecords, checked, validated_as
from services.producer.resume import ResumePlan
from services.producer.sink import EventRecord, RunOptions

log = logging.getLogger(__name__)

EFFECT_EVENT = "agui-relay.effect"
"""CUSTOM event after each ``ctx.effect``: ``{"key", "status"}`` (``performed`` = it ran)."""


class AgentPort:
    """One run's ``RunPort``: what its agent reads, and the queue its events wait in."""

    def __init__(self, run_input: RunAgentInput, plan: ResumePlan, book: RunBook,
                 records: RunRecords, options: RunOptions, *, ledger: EffectLedger | None,
                 request_id: str | None, principal: str | None,
                 log_fields: Mapping[str, Any]) -> None:
        self._input = run_input
        self.plan = plan
        self.book = book
        self.records = records
        self.options = options
        self.ledger = ledger
        self.request_id = request_id
        """The RunRequest this run was admitted from (named in its log lines)."""
        self.principal = principal
        """The tenant that asked for the run (child runs it starts carry it too)."""
        self.queue: deque[EventRecord] = deque()
        """Records admitted and not yet published, in order."""
        self.wake = asyncio.Event()
        """Set when records are queued, the agent ended, or a stop was asked for."""
        self.space = asyncio.Event()
        self.space.set()
        self.stop_requested = False
        self.stopping = False
        """True once the run takes no more events (the agent is ending or was stopped)."""
        self.cancel_requested = False
        self.violation: AgentProtocolError | None = None
        """The first event refused, which the run ends with."""
        self.result: Any = None
        self.effects: set[asyncio.Future[Effect]] = set()
        self._log = dict(log_fields)

    # ---- what the agent reads ------------------------------------------

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
        return self.cancel_requested

    def now(self) -> datetime:
        return self.options.clock()

    def suspension_of(self, subagent_run_id: str) -> list[str] | None:
        return self.book.suspension_of(subagent_run_id)

    def pending_frontend_calls(self) -> list[str]:
        return self.book.pending_frontend_calls()

    # ---- what the agent records ----------------------------------------

    def raise_interrupt(self, interrupt: Interrupt) -> Interrupt:
        return self.book.raise_interrupt(interrupt)

    def add_usage(self, usage: TokenUsage) -> None:
        self.book.add_usage(usage)

    def set_result(self, result: Any) -> None:
        self.result = result

    async def emit(self, event: BaseEvent) -> None:
        """Admit one agent event (validated, checked, numbered) for publishing."""
        await self._wait_for_space()
        try:
            self.admit(*checked(event))
        except AgentProtocolError as exc:
            self._refuse(exc)

    async def emit_wire(self, kind: type[BaseEvent], wire: dict[str, Any]) -> None:
        """Admit one event given as its wire dict: validated as ``kind``, published as is.

        The helpers' fast path: no model-to-JSON round trip for every streamed delta.
        """
        if self.stopping or not self.space.is_set():
            await self._wait_for_space()
        try:
            self.admit(validated_as(kind, wire), wire)
        except AgentProtocolError as exc:
            self._refuse(exc)

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
        self.effects.add(task)
        task.add_done_callback(self.effects.discard)
        effect = await asyncio.shield(task)
        await self.emit(CustomEvent(name=EFFECT_EVENT, value={"key": key, "status": effect.status}))
        return effect

    # ---- admission -----------------------------------------------------

    def admit(self, event: BaseEvent, wire: dict[str, Any]) -> None:
        """Size, bookkeeping, then numbered records on the queue (``wire`` is ``event``'s).

        An event whose record would not fit is refused before the bookkeeping counts
        it: the run ends ``event_too_large``, closing only what was published open.
        """
        records = self.records
        value = records.value(wire)
        if len(value) > records.room:
            raise AgentProtocolError(self.options.limits.event_refusal(
                event.type.value, len(value), records.room), code="event_too_large")
        for out in self.book.admit(event):
            self.enqueue(records.numbered(value, event.type.value) if out is event
                         else records.record(out))
        if len(self.queue) >= self.options.queue_limit:
            self.space.clear()

    def enqueue(self, record: EventRecord) -> None:
        self.queue.append(record)
        self.wake.set()

    def request_stop(self) -> None:
        self.stop_requested = True
        self.wake.set()

    def stop_taking(self) -> None:
        """Take no more events: a waiting ``emit`` raises ``RunAborted``."""
        self.stopping = True
        self.space.set()

    async def _wait_for_space(self) -> None:
        while not self.space.is_set() and not self.stopping:
            await self.space.wait()
        if self.stopping:
            raise RunAborted("the run is no longer taking events")

    def _refuse(self, exc: AgentProtocolError) -> NoReturn:
        self.violation = exc
        self.stop_taking()
        self.request_stop()
        raise RunAborted(exc.message) from exc
