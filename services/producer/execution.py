"""One dispatched input, run under its thread's checkpoint, published to ``events`` and ``runs``.

The commit order of one run, written once (``recovery`` relies on it; a
crash between any two steps leaves a state it can finish):

1. skip the dispatch if the thread's checkpoint lists its run as closed
   (a redelivery after the run's terminal event was written);
2. write the start marker (``begin_run``: the run is active; the
   interrupts it answers are consumed, the uncovered ones stay open) and
   wait for the broker;
3. publish the run's events as the runner produces them, in order, on the
   thread's key (one idempotent producer, not waited for one by one), its
   ``RUN_STARTED`` to ``runs`` as well;
4. wait until every earlier record is acknowledged, publish the terminal
   event to ``runs`` and wait for it, then to ``events`` and wait for it
   (the order ``publish`` explains: the end is on ``runs`` before anyone
   can read it on ``events``);
5. write the end marker (``end_run``: closed, what stays open), without
   waiting: should it be lost, recovery finds the terminal event on
   ``events`` and closes the run the same way;
6. the dispatch's offset is done (the worker commits the lowest contiguous
   done offset of each partition).

A crash before step 2 completes leaves nothing behind (the dispatch is
redelivered and runs); after it, the start marker makes the next owner
close the run (``recovery``); inside step 4, it finds the terminal event on
``runs`` and copies it to ``events``; after it, it finds it on both.

Records that cannot be written never stop the worker (``sizes``): a
dispatch whose input breaks the limits (``contracts.limits``; another
client may have written it) is opened and ended with RUN_ERROR
``input_too_large`` at once — no agent, no marker — or dead-lettered when
even that RUN_STARTED would not fit; a start marker that would not fit ends
the run the same way (``checkpoint_too_large``); an end whose terminal
event or end marker would not fit ends with RUN_ERROR instead (the sink's
``refusal``); an end marker that cannot be sent is left to recovery. A
record the broker refuses for its size all the same (a topic's
``max.message.bytes`` lowered under ``AGUI_MAX_RECORD_BYTES`` while the
worker runs) ends its run the same way: an event or the run's end with
RUN_ERROR ``event_too_large`` (``KafkaRunSink``, then the runner), a start
marker with ``checkpoint_too_large``. Records the broker cannot take for now
(the cluster down, its partition's leader still being elected) stop nothing
either: the run holds in step 3 or 4 and sends them again until the broker
takes them (``redelivery``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ag_ui.core import PROTOCOL_VERSION, BaseEvent, RunErrorEvent, RunStartedEvent

from contracts import Dispatch
from contracts.codec import to_wire
from contracts.limits import InputLimits, check_run_input
from services.kafka.clients import AIOKafkaProducer, KafkaError
from services.kafka.size_refusals import TOO_LARGE
from services.producer import checkpoint as cp
from services.producer.agent import AgentDefinition
from services.producer.bookkeeping import Failed
from services.producer.errors import RecordTooLargeError
from services.producer.publish import (
    EVENT_CODE,
    Destination,
    RunWriter,
    event_bytes,
    event_partitions,
)
from services.producer.redelivery import (
    Delivery,
    RecordsLostError,
    deliver,
    failed,
    failure,
    retriable,
    settle,
)
from services.producer.resume import plan_resume
from services.producer.runner import EventRecord, Runner, RunOptions, RunReport
from services.producer.settings import ProducerSettings
from services.producer.sizes import RecordGuard, RunLimits
from services.producer.store import Change, CheckpointStore, ThreadLedger
from services.runtime import metrics
from services.runtime.logging import run_fields
from services.runtime.settings import LimitSettings

log = logging.getLogger(__name__)


class KafkaRunSink:
    """A run's records to the ``events`` topic, its boundaries to ``runs`` as well.

    Delivery futures are kept in send order, each with its record, and dropped from
    the front as they resolve (a run's records share a partition, so they resolve in
    order): a failure is raised at the next send, and only the few still in flight are
    held — no callback, no wait per record. The run's end is written in the order
    ``publish`` explains: everything before it acknowledged, then the terminal record
    on ``runs``, then on ``events``.

    A record the broker refused for its size (a topic's ``max.message.bytes`` lowered
    under ``AGUI_MAX_RECORD_BYTES`` while the worker runs) is raised as the
    ``RecordTooLargeError`` naming it (``event_too_large``), so the runner ends the run
    with a RUN_ERROR saying so instead of the worker stopping; the records still in
    flight are let go (what reached the broker is not known record by record).
    """

    def __init__(self, writer: RunWriter,
                 closing: Callable[[RunReport], int | None] | None = None) -> None:
        self.writer = writer
        self.closing = closing
        """The size of the end marker a report would write when it would not fit."""
        self._pending: deque[Delivery] = deque()
        self._started: Delivery | None = None
        """The ``RUN_STARTED`` boundary on ``runs``, until the end waits for it."""

    def refusal(self, report: RunReport) -> Failed | None:
        size = self.closing(report) if self.closing is not None else None
        if size is None:
            return None
        return Failed(self.writer.guard.limit.why("the checkpoint recording the run's end", size),
                      "checkpoint_too_large")

    async def send(self, record: EventRecord) -> None:
        pending, writer = self._pending, self.writer
        if record.event_type == "RUN_STARTED":
            pending.append(await self._sent(writer.topic, record))
            self._started = await self._sent(writer.boundaries, record)
        else:  # the hot path: the producer's own coroutine, not wrapped in one more
            try:
                future = await writer.send(record.event_type, record.seq, record.value)
            except TOO_LARGE as exc:  # the client's own check (max_request_size)
                raise self._refused(record, writer.topic) from exc
            except KafkaError as exc:  # not even taken (its buffer full): hold before the next
                if not retriable(exc):
                    raise
                pending.append(Delivery(failed(exc), record, writer.topic))
                await self._acknowledged()
                return
            pending.append(Delivery(future, record, writer.topic))
        while pending[0].future.done():
            if failure(pending[0].future) is not None:
                await self._acknowledged()  # holds while the broker cannot take them
                return
            pending.popleft()
            if not pending:
                return

    async def send_terminal(self, record: EventRecord, report: RunReport) -> None:
        """Write the end; a ``RecordTooLargeError`` when a record of the run, or this one,
        was refused for its size (this one is then on neither topic, or on ``runs`` only
        when ``events`` alone refused it)."""
        writer = self.writer
        await self._acknowledged()
        for topic in (writer.boundaries, writer.topic):
            self._pending.append(await self._sent(topic, record))
            await self._acknowledged()

    async def _acknowledged(self) -> None:
        """Wait until every record sent so far is acknowledged, holding the run while the
        broker cannot take them (``redelivery``); a refusal raises."""
        pending = self._pending
        if self._started is not None:
            pending.append(self._started)
            self._started = None
        try:
            await settle(pending, self.writer)
        except RecordsLostError:
            self._let_go()
            raise
        if pending:
            self._delivered(pending.popleft())

    async def _sent(self, topic: str, record: EventRecord) -> Delivery:
        try:
            return await deliver(self.writer, record, topic)
        except TOO_LARGE as exc:  # the client's own check (max_request_size)
            raise self._refused(record, topic) from exc

    def _delivered(self, sent: Delivery) -> None:
        """Raise ``sent``'s delivery failure, if any (letting the rest go)."""
        future, record, topic = sent
        exc = failure(future)
        if exc is None:
            return
        if isinstance(exc, TOO_LARGE):  # the broker refuses a batch: name its largest record
            batch = [(d.record, d.topic) for d in self._pending
                     if d.topic == topic and isinstance(failure(d.future), TOO_LARGE)]
            largest, _ = max([(record, topic), *batch], key=lambda rt: len(rt[0].value))
            self._let_go()
            raise self._refused(largest, topic, len(batch) + 1) from exc
        self._let_go()
        raise exc

    def _let_go(self) -> None:
        """Drop the records still in flight after a failure, their outcome unread."""
        for d in self._pending:
            d.future.add_done_callback(failure)
        self._pending.clear()
        if self._started is not None:
            self._started.future.add_done_callback(failure)
            self._started = None

    def _refused(self, record: EventRecord, topic: str, batched: int = 1) -> RecordTooLargeError:
        writer = self.writer
        what = f"the run's {record.event_type} #{record.seq}"
        if batched > 1:
            what += f" (in a batch of {batched} of its records)"
        return writer.guard.refused_by_broker(
            what, topic, EVENT_CODE, writer.key, record.value,
            writer.headers(record.event_type, record.seq))


@dataclass
class Prepared:
    """A dispatch ready to run: its runner, and what stays open if it fails."""

    dispatch: Dispatch
    agent: str
    runner: Runner
    still_open: list[Any]
    writer: RunWriter
    refusal: Failed | None = None
    """Set when the input breaks the limits: the run opens and ends with this RUN_ERROR."""
    unopenable: str | None = None
    """Set when not even that can be written: why the dispatch is dead-lettered."""


def end_marker(run_id: str, report: RunReport, now: datetime) -> Change:
    """The checkpoint change recording ``report``'s run as closed (step 5)."""
    still_open = list(report.open_interrupts)
    return lambda c: cp.end_run(c, run_id=run_id, open_after=still_open, now=now)


class Executor:
    """Turns dispatches into checkpointed runs (the steps in this module's docstring)."""

    def __init__(self, settings: ProducerSettings, producer: AIOKafkaProducer,
                 store: CheckpointStore, clock: Callable[[], datetime],
                 limits: InputLimits | None = None,
                 ttls: Mapping[str, timedelta | None] | None = None) -> None:
        self.settings = settings
        self.producer = producer
        self.store = store
        self.clock = clock
        self.topic = store.settings.topics.events
        self.ledger = ThreadLedger(store)
        self.limits = RunLimits(store.settings.max_record_bytes,
                                limits or LimitSettings().limits)
        self.guard = RecordGuard.of(store.settings.max_record_bytes)
        self.options = RunOptions(uncovered_policy=settings.uncovered_policy,
                                  cancel_grace_s=settings.cancel_grace_s, clock=clock,
                                  limits=self.limits)
        self._by_agent = {agent: replace(self.options, interrupt_ttl=ttl)
                          for agent, ttl in (ttls or {}).items() if ttl is not None}
        """Agents with a default interrupt TTL (``services.producer.ttl``) run with their own."""
        self.partitions: int | None = None
        self.boundaries = Destination(store.settings.topics.runs)
        """Where runs' boundary records go too (``runs``), with its partition count."""
        self._same_count = False
        """True when checkpoints has as many partitions as events: a thread's partition,
        hashed once for its events, is then its checkpoint's too."""

    async def start(self) -> None:
        """Learn the events and runs topics' partition counts (runs then name partitions
        themselves)."""
        configured = self.store.settings.partitions
        self.partitions = await event_partitions(self.producer, self.topic, configured)
        runs = await event_partitions(self.producer, self.boundaries.topic, configured)
        self.boundaries = Destination(self.boundaries.topic, runs)
        if runs != self.partitions:
            log.error("%s has %d partitions and %s %d: they must be co-partitioned (the "
                      "gatekeeper reads partition p of requests with p of runs); see "
                      "agui-relay topics describe", self.boundaries.topic, runs, self.topic,
                      self.partitions)
        self._same_count = (await event_partitions(self.producer, self.store.topic,
                                                   configured) == self.partitions)

    def prepare(self, agent: str, definition: AgentDefinition, dispatch: Dispatch,
                traceparent: str | None = None, *, input_wire: Any = None,
                size_hint: int | None = None) -> Prepared | None:
        """The run for ``dispatch``, or None when its run is already closed (step 1).

        ``traceparent``: the run's hop of its trace, carried by every event record.
        ``input_wire``: the input's wire form as the dispatch record holds it, when known
        (RUN_STARTED echoes it instead of serialising the input again); ``size_hint``:
        the record's ``contracts.limits.bracket_count`` (the depth check's shortcut).
        """
        run_input = dispatch.input
        # None: a thread this runtime never ran (nothing closed, active or open on it);
        # not building an empty checkpoint for it saves a model per run.
        checkpoint = self.store.known(run_input.thread_id)
        if checkpoint is not None and cp.has_closed(checkpoint, run_input.run_id):
            log.info("dispatch of run %s redelivered after it closed; skipped",
                     run_input.run_id,
                     extra=run_fields(run_input.thread_id, run_input.run_id, dispatch.request_id))
            return None
        active = checkpoint.active if checkpoint is not None else None
        if active is not None:
            log.warning("thread still marks run %s (worker %s) active; starting %s anyway",
                        active.run_id, active.worker, run_input.run_id,
                        extra=run_fields(run_input.thread_id, run_input.run_id,
                                         dispatch.request_id))
        plan = plan_resume(run_input,
                           cp.open_interrupts(checkpoint) if checkpoint is not None else [],
                           gated_tools=definition.gated_tools,
                           dispatch_warnings=dispatch.warnings or ())
        refused = bool(plan.uncovered) and self.settings.uncovered_policy == "reject"
        still_open = list(plan.prior.values()) if refused else list(plan.uncovered)
        writer = RunWriter(self.producer, self.topic, run_input.thread_id, run_input.run_id,
                           agent, self.partitions, traceparent, guard=self.guard,
                           boundaries=self.boundaries)
        if self._same_count and writer.partition is not None:
            self.store.place(run_input.thread_id, writer.partition)
        thread_id, run_id = run_input.thread_id, run_input.run_id
        sink = KafkaRunSink(writer, lambda report: self.store.excess(
            thread_id, end_marker(run_id, report, self.clock())))
        runner = Runner(definition, run_input, plan, sink,
                        options=self._by_agent.get(agent, self.options),
                        ledger=self.ledger, agent_name=agent, request_id=dispatch.request_id,
                        input_wire=input_wire, principal=dispatch.principal)
        prepared = Prepared(dispatch, agent, runner, still_open, writer)
        broken = check_run_input(input_wire if input_wire is not None else to_wire(run_input),
                                 self.limits.ids, size_hint=size_hint)
        if broken is not None:
            prepared.refusal = Failed(broken.detail, "input_too_large")
            prepared.unopenable = self._unopenable(prepared, prepared.refusal)
        return prepared

    async def execute(self, prepared: Prepared) -> RunReport:
        """Steps 2 to 5; returns how the run ended."""
        if prepared.refusal is not None:
            return await self.refuse(prepared, prepared.refusal)
        run_input = prepared.dispatch.input
        now = self.clock()
        try:
            await self.store.update(run_input.thread_id, lambda c: cp.begin_run(
                c, run_id=run_input.run_id, request_id=prepared.dispatch.request_id,
                agent=prepared.agent, worker=self.settings.worker_id,
                still_open=prepared.still_open, now=now))
        except RecordTooLargeError as exc:
            return await self.refuse(prepared, Failed(exc.message, exc.code))
        limit = self.settings.run_timeout_s
        deadline = asyncio.get_running_loop().call_later(
            limit, prepared.runner.abort, f"the run took longer than its {limit:g}s "
            "(AGUI_RUN_TIMEOUT_S)", "run_timeout")
        try:
            with metrics.running(prepared.agent):
                report = await prepared.runner.run()
        finally:
            deadline.cancel()
        metrics.run_finished(prepared.agent, report.outcome)
        try:
            marker = await self.store.write(run_input.thread_id, end_marker(
                run_input.run_id, report, self.clock()))
        except Exception as exc:  # too large after all, or not sendable: recovery closes it
            self._log_lost_marker(exc)
        else:
            marker.add_done_callback(self._log_lost_marker)
        return report

    def _refusal_events(self, prepared: Prepared, failed: Failed) -> list[BaseEvent]:
        run_input = prepared.dispatch.input
        return [RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id,
                                protocol_version=PROTOCOL_VERSION),
                RunErrorEvent(message=failed.message, code=failed.code)]

    def _unopenable(self, prepared: Prepared, failed: Failed) -> str | None:
        """Why the run of a refused dispatch cannot even be opened, or None."""
        for seq, event in enumerate(self._refusal_events(prepared, failed)):
            size = prepared.writer.excess(event.type.value, seq,
                                          event_bytes(event, self.clock))
            if size is not None:
                return (f"{failed.message}; and its {event.type.value} would not fit: "
                        + self.guard.limit.why("it", size))
        return None

    async def refuse(self, prepared: Prepared, failed: Failed) -> RunReport:
        """Open the run and end it with RUN_ERROR ``failed`` at once: no agent, no marker."""
        run_input = prepared.dispatch.input
        log.warning("run %s refused: %s", run_input.run_id, failed.message,
                    extra=run_fields(run_input.thread_id, run_input.run_id,
                                     prepared.dispatch.request_id))
        records = [EventRecord(seq, event_bytes(event, self.clock), event.type.value)
                   for seq, event in enumerate(self._refusal_events(prepared, failed))]
        report = RunReport("error", records[-1], tuple(prepared.still_open), len(records))
        sink = KafkaRunSink(prepared.writer)
        for record in records[:-1]:
            await sink.send(record)
        await sink.send_terminal(records[-1], report)
        metrics.run_finished(prepared.agent, "error")
        return report

    @staticmethod
    def _log_lost_marker(future: asyncio.Future[Any] | BaseException) -> None:
        exc = (future if isinstance(future, BaseException)
               else None if future.cancelled() else future.exception())
        if exc is not None:
            log.warning("an end marker was not written (recovery will close the run from "
                        "its terminal event): %s", exc)
