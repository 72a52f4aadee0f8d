"""One hosted agent: its dispatch consumer, its runs, its share of the partitions.

The loop polls ``dispatch.<agent>`` (group ``<prefix>.producer.<agent>``),
hands each record to the ``Scheduler`` (threads in parallel, one run per
thread in order, bounded), starts what may start, pauses partitions holding
too many unfinished dispatches and resumes them when they drain, and
commits each partition's lowest contiguous position of closed runs.

Rebalances: on assignment the partitions' checkpoints are restored and any
run of this agent a lost worker left open there is closed (``recovery``)
before a dispatch is read; on revocation (and on shutdown) queued
dispatches are dropped — the next owner gets them again — running ones may
finish within ``AGUI_PRODUCER_DRAIN_S`` and are then stopped with RUN_ERROR
``worker_stopped``, and the positions reached are committed. A run that
fails in a way the runtime cannot report (the broker failing its records,
even the RUN_ERROR that would say so) is fatal to the worker: its offset is
not committed, and whoever takes the partition over closes the run. A record
the broker would refuse, or refused, for its size is not such a failure
(``execution``: the run ends with a RUN_ERROR saying so), nor is one it
cannot take for now (``redelivery``: the run holds until it does); a
dispatch that cannot be read, or whose refusal cannot even be written, is
dead-lettered (``deadletter``) and skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from contracts import DecodeError, Dispatch, decode
from contracts.headers import TRACEPARENT, header_value
from contracts.limits import bracket_count
from services.kafka.clients import (
    AIOKafkaConsumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    KafkaError,
    TopicPartition,
    new_consumer,
)
from services.kafka.lag import LagProbe
from services.producer import checkpoint as cp
from services.producer.agent import AgentDefinition
from services.producer.deadletter import Source, fitted
from services.producer.execution import Executor
from services.producer.recovery import recover
from services.producer.runner import Runner
from services.producer.scheduler import Job, Scheduler
from services.runtime import metrics, tracing
from services.runtime.logging import bound_run, run_fields

log = logging.getLogger(__name__)

STOPPED_MESSAGE = "the worker stopped before the run finished"


RunKey = tuple[str, str]
"""(threadId, runId): a run id names a run within its thread only."""


@dataclass(frozen=True, slots=True)
class Dispatched:
    """A readable dispatch record, waiting for its turn to run."""

    dispatch: Dispatch
    trace: tracing.TraceParent
    """The run's hop of the trace its record carried (a new trace when it had none)."""
    value: bytes
    """The record's value: RUN_STARTED echoes the input from it, already in wire form."""

    def input_wire(self) -> Any:
        """The input as the record holds it: what serialising the decoded input gives."""
        return orjson.loads(self.value)["input"]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A dispatch record that could not be decoded, waiting for its turn to be dead-lettered
    (carried by its job, so a job dropped with its partition takes it along: kept in a map
    beside the scheduler, such records were held for good; found by review)."""

    source: Source
    error: DecodeError


Work = Dispatched | Unreadable


class AgentHost:
    """Runs one agent's dispatches on the partitions this worker owns."""

    def __init__(self, name: str, definition: AgentDefinition, executor: Executor,
                 take_cancel: Callable[[RunKey], bool],
                 fatal: Callable[[BaseException], None]) -> None:
        self.name = name
        self.definition = definition
        self.executor = executor
        self.store = executor.store
        self.kafka = executor.store.settings
        self.settings = executor.settings
        self.topic = self.kafka.topics.dispatch(name)
        self.group = f"{self.kafka.topic_prefix}.producer.{name}"
        self.take_cancel = take_cancel
        self.fatal = fatal
        self.scheduler: Scheduler[Work] = Scheduler(
            self.settings.max_concurrent_runs, self.settings.buffered_per_partition)
        self.active: dict[RunKey, Runner] = {}
        """Runs in progress by thread and run id (the worker routes cancels here). A run id
        names a run within its thread only: keyed by it alone, a later ``r1`` on another
        thread took the place of the first, and a cancel stopped another thread's run
        (found by soak)."""
        self._tasks: dict[Job[Work], asyncio.Task[None]] = {}
        self._owned: set[int] = set()
        """Partitions assigned *and* restored: their dispatches may run."""
        self._held: dict[int, list[ConsumerRecord[bytes, bytes]]] = {}
        self._committed: dict[int, int] = {}
        self._committing: asyncio.Task[None] | None = None
        """The offset commit in flight (the loop does not wait for the broker's answer)."""
        self.ready = asyncio.Event()
        """Set once partitions were first assigned (and restored)."""
        self._consumer: AIOKafkaConsumer | None = None
        self._lag = LagProbe(self.group)

    @property
    def partitions(self) -> frozenset[int]:
        """The dispatch partitions this host owns (assigned and restored)."""
        return frozenset(self._owned)

    @property
    def consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError(f"agent host {self.name} is not running")
        return self._consumer

    async def run(self, stop: asyncio.Event) -> None:
        """Consume and run until ``stop``; then drain, commit and leave the group."""
        self._consumer = new_consumer(
            self.kafka, f"{self.settings.worker_id}-{self.name}", group_id=self.group,
            session_timeout_ms=self.settings.session_timeout_ms,
            max_poll_records=max(16, min(500, self.settings.buffered_per_partition)))
        self.consumer.subscribe([self.topic], listener=_Rebalance(self))
        await self.consumer.start()
        try:
            while not stop.is_set():
                batch = await self.consumer.getmany(timeout_ms=200)
                for tp, records in batch.items():
                    for record in records:
                        self._offer(tp.partition, record)
                self._start_ready()
                self._apply_backpressure()
                self._commit_soon()
                await self._lag.maybe_sample(self.consumer)
        finally:
            try:
                await self._release(set(self._owned))
            finally:
                if self._committing is not None:
                    await asyncio.wait([self._committing])
                self._lag.clear()
                await self.consumer.stop()

    # ---- records in -------------------------------------------------------

    def _offer(self, partition: int, record: ConsumerRecord[bytes, bytes]) -> None:
        if partition not in self._owned:
            # Assigned, but its checkpoints are still being restored and its left-open
            # runs closed (the fetcher may deliver before the assignment callback is
            # done): hold the record until then, in order.
            self._held.setdefault(partition, []).append(record)
            return
        try:
            dispatch = decode(Dispatch, record.value)
        except DecodeError as exc:
            log.error("unreadable dispatch at %s/%d@%d: %s", record.topic, partition,
                      record.offset, exc)
            self.scheduler.offer(partition, record.offset, f"\x00dead:{partition}", Unreadable(
                Source(record.topic, partition, record.offset, record.key, record.value), exc))
            return
        trace = tracing.next_hop(header_value(record.headers, TRACEPARENT))
        self.scheduler.offer(partition, record.offset, dispatch.input.thread_id,
                             Dispatched(dispatch, trace, record.value))

    def _start_ready(self) -> None:
        for job in self.scheduler.ready():
            self._tasks[job] = asyncio.create_task(self._run_job(job))

    async def _run_job(self, job: Job[Work]) -> None:
        work = job.payload
        ran = True
        try:
            if isinstance(work, Unreadable):
                await self._dead_letter(work.source, work.error.reason, str(work.error))
            else:
                ran = await self._run_dispatch(job, work)
        except Exception as exc:
            fields = (run_fields(work.dispatch.input.thread_id, work.dispatch.input.run_id,
                                 work.dispatch.request_id) if isinstance(work, Dispatched)
                      else {})
            log.critical("run of dispatch %s/%d@%d could not be completed; stopping the "
                         "worker so another takes the partition over", self.topic,
                         job.partition, job.offset, exc_info=exc, extra=fields)
            self.fatal(exc)
            return
        finally:
            self._tasks.pop(job, None)
        self.scheduler.finish(job, ran=ran)
        self._start_ready()

    async def _run_dispatch(self, job: Job[Work], work: Dispatched) -> bool:
        """Run the dispatch (or skip it, its run already closed); False when it was not
        begun because its partition was revoked meanwhile (the next owner runs it)."""
        dispatch, trace = work.dispatch, work.trace
        run_input = dispatch.input
        with bound_run(run_input.thread_id, run_input.run_id, dispatch.request_id,
                       trace.trace_id), tracing.within(trace):
            if dispatch.handover is not None:
                await self.executor.store.handover(
                    run_input.thread_id, dispatch.handover.run_id, dispatch.handover.agent,
                    self.settings.handover_wait_s)
                if job.partition not in self._owned:
                    log.info("partition %d was revoked while run %s waited for its "
                             "handover; its next owner runs it", job.partition,
                             run_input.run_id)
                    return False
            prepared = self.executor.prepare(self.name, self.definition, dispatch,
                                             trace.header(), input_wire=work.input_wire(),
                                             size_hint=bracket_count(work.value))
            if prepared is None:
                return True
            if prepared.unopenable is not None:
                log.error("dispatch at %s/%d@%d cannot be run: %s", self.topic, job.partition,
                          job.offset, prepared.unopenable)
                await self._dead_letter(Source(self.topic, job.partition, job.offset,
                                               run_input.thread_id.encode(), work.value),
                                        "input_too_large", prepared.unopenable)
                return True
            run_id = run_input.run_id
            key = (run_input.thread_id, run_id)
            self.active[key] = prepared.runner
            try:
                if self.take_cancel(key):
                    log.info("run %s was cancelled before it started", run_id,
                             extra=run_fields(run_input.thread_id, run_id, dispatch.request_id))
                    prepared.runner.cancel()
                await self.executor.execute(prepared)
            finally:
                self.active.pop(key, None)
        return True

    async def _dead_letter(self, source: Source, code: str, reason: str) -> None:
        key, value = fitted(source, code, reason, self.executor.clock(), self.executor.guard)
        future = await self.executor.producer.send(self.kafka.topics.deadletter, value, key=key)
        await future
        metrics.dead_letter("producer", code)

    # ---- flow control and commits -------------------------------------------

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self.topic, partition)

    def _apply_backpressure(self) -> None:
        pause, resume = self.scheduler.backpressure()
        if pause & self._owned:
            log.info("pausing %s partitions %s: %d dispatches in flight", self.topic,
                     sorted(pause & self._owned), self.settings.buffered_per_partition)
            self.consumer.pause(*[self._tp(p) for p in pause & self._owned])
        if resume & self._owned:
            self.consumer.resume(*[self._tp(p) for p in resume & self._owned])

    def _commit_soon(self) -> None:
        """Commit the positions reached, in the background, one commit at a time: the
        loop goes on reading dispatches (and starting runs) while the broker answers."""
        task = self._committing
        if task is not None:
            if not task.done():
                return
            task.result()  # an unexpected failure stops the loop, as an awaited commit did
        if self._due(self._owned):
            self._committing = asyncio.create_task(self._commit())

    def _due(self, partitions: set[int]) -> dict[int, int]:
        return {p: o for p, o in self.scheduler.positions().items()
                if p in partitions and self._committed.get(p) != o}

    async def _commit(self, partitions: set[int] | None = None) -> None:
        due = self._due(self._owned if partitions is None else partitions)
        if not due:
            return
        try:
            await self.consumer.commit({self._tp(p): o for p, o in due.items()})
        except KafkaError as exc:
            log.warning("offset commit of %s failed (retried later): %s", self.topic, exc)
            return
        self._committed.update(due)

    # ---- rebalances ---------------------------------------------------------

    async def assigned(self, partitions: set[int]) -> None:
        """Restore the new partitions' checkpoints and close runs lost workers left open.

        Only then do the partitions count as owned: records fetched meanwhile are
        held, and offered (in order) once the partition is ready.
        """
        new = partitions - self._owned
        try:
            if new:
                await self.store.restore(new, owner=self.name)
                stale = [c for c in self.store.threads(new) if _left_open(c, self.name)
                         and c.active is not None
                         and (c.thread_id, c.active.run_id) not in self.active]
                await recover(self.store, self.executor.producer, self.name, stale,
                              margin_s=self.settings.recovery_margin_s,
                              clock=self.executor.clock)
        except Exception as exc:
            log.critical("could not restore partitions %s of %s", sorted(new), self.topic,
                         exc_info=exc)
            self.fatal(exc)
            raise
        self._owned |= new
        for p in sorted(new):
            for record in self._held.pop(p, []):
                self._offer(p, record)
        self._start_ready()
        log.info("%s: own partitions %s", self.topic, sorted(self._owned))
        self.ready.set()

    async def revoked(self, partitions: set[int]) -> None:
        """Give partitions up: drain or stop their runs, commit, forget them."""
        for p in partitions - self._owned:
            self._held.pop(p, None)
        await self._release(partitions & self._owned)

    async def _release(self, partitions: set[int]) -> None:
        if not partitions:
            return
        self._owned -= partitions  # from now on their records are held, none starts
        running = self.scheduler.revoke(partitions)
        tasks = [t for j in running if (t := self._tasks.get(j)) is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.settings.drain_s)
            if late:
                log.warning("stopping %d runs still in progress on %s", len(late), self.topic)
                for job in running:
                    if isinstance(job.payload, Dispatched) and self._tasks.get(job) in late:
                        run_input = job.payload.dispatch.input
                        runner = self.active.get((run_input.thread_id, run_input.run_id))
                        if runner is not None:
                            runner.abort(STOPPED_MESSAGE, "worker_stopped")
                await asyncio.wait(late, timeout=self.settings.cancel_grace_s + 30)
        if self._committing is not None:  # let the one in flight land first
            await asyncio.wait([self._committing])
        await self._commit(partitions)
        self.scheduler.forget(partitions)
        for p in partitions:
            self._committed.pop(p, None)
            self._held.pop(p, None)  # fetched under the old assignment: redelivered later
        self.store.release(partitions, owner=self.name)


def _left_open(checkpoint: cp.ThreadCheckpoint, agent: str) -> bool:
    return checkpoint.active is not None and checkpoint.active.agent == agent


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, host: AgentHost) -> None:
        self.host = host

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.host.revoked({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.host.assigned({tp.partition for tp in assigned})
