"""The producer worker (``agui-relay producer``): hosted agents, cancels, one producer.

A worker creates its topics if missing, starts one idempotent producer
(events and checkpoints), listens to ``control`` from its end, and runs an
``AgentHost`` per hosted agent. A ``ControlCommand`` cancels the named run
if it is running here (the agent is cancelled at its next await, what it
opened is closed, the run finishes ``cancelled``); a cancel for a run not
running here is ignored with a log line, and remembered for a while in
case the run's dispatch is still on its way to this worker. SIGTERM drains
(see ``host``); a run that cannot be completed stops the worker with an
error, so another worker takes its partitions over and closes the run.

A worker owns its process, and sets CPython's collector thresholds for it
(``GC_THRESHOLDS``): by default a young-generation pass runs every 700 net
allocations, and a worker allocates a dozen short-lived objects per event
(its wire dict, model, record, delivery future) while thousands of runs'
state stays alive; with the default, the collector took about a third of
the CPU of a streaming run and of 1,000 concurrent short runs (measured
in-process with ``py-spy``). Nothing is frozen: reference counting frees
nearly everything, and the rarer passes still reclaim cycles. The young
threshold is counted in *net* allocations (objects freed count back), so it
is reached only while the live state grows — 1,000 runs starting at once
grow it by some 100,000 objects, all alive and all freed by reference
counting once their runs close: a pass then only traverses live run state
(10-30 ms each, two per such burst at 50,000). At 200,000 such a burst
passes no collection at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime

from contracts import ControlCommand, DecodeError, decode
from services.kafka.admin import check_compacted, check_record_limit, ensure_topics
from services.kafka.clients import new_producer
from services.kafka.lookup import wait_for_broker
from services.kafka.reader import Start, TopicReader
from services.producer import checkpoint as cp
from services.producer.agent import AgentDefinition
from services.producer.checkpoint_disk import CheckpointDisk
from services.producer.execution import Executor
from services.producer.host import AgentHost, RunKey
from services.producer.settings import ProducerSettings
from services.producer.store import CheckpointStore
from services.producer.ttl import interrupt_ttls
from services.runtime.logging import run_fields
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

GC_THRESHOLDS = (200_000, 20, 100)
"""A young-generation pass per 200,000 net allocations (CPython's default: 700)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class CancelMemo:
    """Cancels for runs not (yet) running here, by thread and run id, up to ``limit``."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._runs: OrderedDict[RunKey, None] = OrderedDict()

    def remember(self, run: RunKey) -> None:
        self._runs[run] = None
        self._runs.move_to_end(run)
        while len(self._runs) > self.limit:
            self._runs.popitem(last=False)

    def take(self, run: RunKey) -> bool:
        """True (once) when a cancel for ``run`` arrived before its dispatch."""
        if run not in self._runs:
            return False
        del self._runs[run]
        return True


class Worker:
    """Hosts agents behind Kafka until stopped."""

    def __init__(self, kafka: KafkaSettings, settings: ProducerSettings,
                 agents: dict[str, AgentDefinition],
                 clock: Callable[[], datetime] = utc_now) -> None:
        if not agents:
            raise ValueError("a producer worker needs at least one agent (AGUI_AGENTS)")
        self.kafka = kafka
        self.settings = settings
        self.agents = agents
        self.ttls = interrupt_ttls(agents, os.environ)
        """Each agent's default interrupt TTL; a setting that is no duration stops here."""
        self.clock = clock
        self.cancels = CancelMemo()
        self.hosts: list[AgentHost] = []
        self.store: CheckpointStore | None = None
        self.failure: BaseException | None = None
        self._stop = asyncio.Event()
        self.control_ready = asyncio.Event()

    @property
    def ready(self) -> bool:
        """Readiness (``/readyz``): listening to ``control``, every agent's partitions
        restored (and left-open runs closed) at least once, and not failed."""
        disk = self.store.disk if self.store is not None else None
        return (self.failure is None and self.control_ready.is_set() and bool(self.hosts)
                and all(h.ready.is_set() for h in self.hosts)
                and not (disk is not None and disk.failing()))

    def fail(self, exc: BaseException) -> None:
        """Stop the worker because of ``exc`` (it exits with an error)."""
        if self.failure is None:
            self.failure = exc
        self._stop.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set (or a run fails unrecoverably, then raise)."""
        gc.set_threshold(*GC_THRESHOLDS)
        if not await wait_for_broker(self.kafka, stop):  # not ready meanwhile
            return
        await ensure_topics(self.kafka, tuple(self.agents))
        topics = self.kafka.topics
        await check_record_limit(self.kafka, (topics.events, topics.runs, topics.checkpoints))
        await check_compacted(self.kafka, (topics.checkpoints,))
        producer = new_producer(self.kafka, f"agui-relay-producer-{self.settings.worker_id}",
                                linger_ms=self.settings.linger_ms)
        await producer.start()
        try:
            disk = (CheckpointDisk(self.settings.state_dir, self.kafka.topics.checkpoints,
                                   self.settings.state_cache_mb, self.settings.state_grace_s)
                    if self.settings.state_dir is not None else None)
            self.store = CheckpointStore(self.kafka, producer, self.clock, disk=disk)
            executor = Executor(self.settings, producer, self.store, self.clock,
                                ttls=self.ttls)
            await executor.start()
            self.hosts = [AgentHost(name, definition, executor, self.cancels.take, self.fail)
                          for name, definition in self.agents.items()]
            control = asyncio.create_task(self._control())
            await self.control_ready.wait()
            tasks = [asyncio.create_task(h.run(self._stop)) for h in self.hosts]
            log.info("producer worker %s hosting %s (max %d runs per agent, uncovered=%s)",
                     self.settings.worker_id, ", ".join(self.agents),
                     self.settings.max_concurrent_runs, self.settings.uncovered_policy)
            watch = asyncio.create_task(stop.wait())
            await asyncio.wait([watch, asyncio.create_task(self._stop.wait()), control, *tasks],
                               return_when=asyncio.FIRST_COMPLETED)
            self._stop.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            control.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await control
            watch.cancel()
            for result in results:
                if isinstance(result, BaseException) and self.failure is None:
                    self.failure = result
        finally:
            await producer.stop()
            if self.store is not None and self.store.disk is not None:
                self.store.disk.close()
        if self.failure is not None:
            raise self.failure

    async def _control(self) -> None:
        """Follow ``control`` from its end and route each cancel."""
        topic = self.kafka.topics.control
        try:
            async with TopicReader(self.kafka, f"{self.settings.worker_id}-control") as reader:
                await reader.assign(await reader.all_partitions(topic), Start.end())
                self.control_ready.set()
                async for batch in reader.batches(stop=self._stop, poll_ms=200):
                    for record in batch:
                        try:
                            self.cancel(decode(ControlCommand, record.value))
                        except DecodeError as exc:
                            log.warning("unreadable control record at %d@%d: %s",
                                        record.partition, record.offset, exc)
        except Exception as exc:
            log.critical("the control listener failed", exc_info=exc)
            self.fail(exc)
            raise
        finally:
            self.control_ready.set()

    def cancel(self, command: ControlCommand) -> bool:
        """Cancel ``command``'s run if it runs here; True when it did."""
        fields = run_fields(command.thread_id, command.run_id)
        for host in self.hosts:
            runner = host.active.get((command.thread_id, command.run_id))
            if runner is not None:
                fields = run_fields(command.thread_id, command.run_id, runner.request_id)
                log.info("cancelling run %s (requested by %s)", command.run_id,
                         command.requested_by, extra=fields)
                runner.cancel()
                return True
        checkpoint = self.store.get(command.thread_id) if self.store is not None else None
        if checkpoint is not None and cp.has_closed(checkpoint, command.run_id):
            log.info("ignored cancel of run %s: it already closed", command.run_id, extra=fields)
        else:
            log.info("ignored cancel of run %s: not running on this worker", command.run_id,
                     extra=fields)
            self.cancels.remember((command.thread_id, command.run_id))
        return False
