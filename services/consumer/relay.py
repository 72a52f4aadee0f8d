"""One consumer-service instance's Kafka plumbing, started and stopped together.

``Relay`` owns the publisher, the fan-out reader (one member of the
consumer-service group, ``url`` its advertised address), the thread view,
the agent directory and the forwarder to the other instances, and the
``RunService`` built on them. The app's lifespan
calls ``start`` (which waits, up to ``AGUI_STARTUP_TIMEOUT_S``, until the
fan-out is positioned, so the first request cannot miss its decision, and the
thread view has read the compacted topic) and ``stop``
(which stops taking streams, lets in-flight cancels finish, then closes the
clients). Routes reach it as ``request.app.state.relay``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from typing import Any

from services.consumer.agents import AgentDirectory
from services.consumer.forward import Forwarder
from services.consumer.freshness import Freshness
from services.consumer.limits import EdgeLimits
from services.consumer.log_tail import LogTail
from services.consumer.lookback import FullScans
from services.consumer.metrics import ConsumerMetrics
from services.consumer.publisher import Publisher
from services.consumer.runs import RunService, spawner
from services.consumer.settings import ConsumerSettings
from services.consumer.streams import FanOut
from services.consumer.tenancy import Tenancy
from services.consumer.threads import ThreadView
from services.consumer.threadstore import ThreadStore, instance_name
from services.kafka.clients import KafkaError
from services.kafka.lag import LagProbe
from services.kafka.lookup import broker_answers, wait_for_broker
from services.kafka.sizing import RecordLimit
from services.runtime.settings import KafkaSettings, LimitSettings

log = logging.getLogger(__name__)

READY_PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class Readiness:
    """The answer of ``/readyz``."""

    ready: bool
    checks: dict[str, bool]
    detail: str = ""


class Relay:
    """The Kafka side of one instance."""

    def __init__(self, settings: ConsumerSettings, kafka: KafkaSettings, *,
                 authenticated: bool = False, limits: LimitSettings | None = None,
                 url: str = "") -> None:
        self.settings = settings
        self.kafka = kafka
        self.limits = (limits or LimitSettings()).limits
        """Id length and JSON depth (``AGUI_MAX_ID_LENGTH``, ``AGUI_MAX_JSON_DEPTH``), read once."""
        self.metrics = ConsumerMetrics()
        self.publisher = Publisher(kafka, ack_timeout_s=settings.decision_timeout_s)
        self.agents = AgentDirectory(kafka, settings.agent_names(), settings.agent_refresh_s)
        self.fanout = FanOut(kafka, self.metrics, max_streams=settings.max_streams,
                             stream_queue=settings.stream_queue,
                             stream_bytes=settings.stream_queue_bytes,
                             index_size=settings.replay_index_size, url=url)
        self.forwarder = Forwarder(
            self.fanout.ownership, self.metrics, settle_s=settings.forward_settle_s,
            read_s=settings.decision_timeout_s + settings.queued_timeout_s
            + 2 * settings.keepalive_s, other_read_s=4 * settings.keepalive_s)
        """Requests for a thread another instance owns go there (``forward``)."""
        self.fanout.tail = LogTail(kafka, self.metrics, settings.stream_log_readers)
        self.full_scans = FullScans(settings.replay_full_scans)
        """Replays reading a partition from its beginning (``replay``)."""
        self.threads = ThreadView(kafka, ThreadStore(
            settings.state_dir, kafka.topics.threads, instance_name(url),
            settings.state_cache_mb)
            if settings.state_dir is not None else None)
        self.freshness = Freshness(self.threads, self.fanout, self.limits,
                                   settings.read_your_writes_s)
        self.tenancy = Tenancy(self.threads, self.fanout, enforced=authenticated,
                               freshness=self.freshness)
        """Thread ownership; ``authenticated``: callers are tenants named by API keys."""
        self.tasks: set[asyncio.Task[Any]] = set()
        self.runs = RunService(settings, kafka, self.fanout, self.publisher, self.agents,
                               self.metrics, spawner(self.tasks), self.tenancy,
                               EdgeLimits(self.limits, RecordLimit(kafka.max_record_bytes)),
                               forwarder=self.forwarder)
        self._starting: asyncio.Task[None] | None = None
        """The start waiting for a broker that did not answer at first (``start``)."""
        self._lag = [(reader, LagProbe(f"{kafka.topic_prefix}.consumer.{reader.name}"))
                     for reader in (self.fanout, self.threads)]
        """The readers are group-less: their lag is labelled with a name of the same shape."""

    async def start(self) -> None:
        """Start the readers and the publisher. A broker that does not answer yet (an
        instance started during an outage) is waited for in the background, serving
        meanwhile, not ready: the lifespan raised aiokafka's "Unable to bootstrap" and
        the instance exited (found by probing)."""
        if await broker_answers(self.kafka) is None:
            await self._start()
            return
        self._starting = asyncio.create_task(self._start_once_answered(), name="relay-start")

    async def _start_once_answered(self) -> None:
        await wait_for_broker(self.kafka, asyncio.Event())  # cancelled by ``stop``
        try:
            await self._start()
        except KafkaError:  # gone again meanwhile: exit as a failed start does, for a restart
            log.critical("could not start once the broker answered; stopping", exc_info=True)
            signal.raise_signal(signal.SIGTERM)

    async def _start(self) -> None:
        await self.publisher.start()
        await self.agents.start()
        await self.fanout.start()
        await self.threads.start()
        try:
            async with asyncio.timeout(self.settings.startup_timeout_s):
                await self.fanout.ready.wait()
                await self.threads.caught_up.wait()
        except TimeoutError:
            log.warning("Kafka readers not ready after %.0f s; serving, not ready",
                        self.settings.startup_timeout_s)

    async def stop(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
        self.runs.closing = True
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=5)
        await self.fanout.stop()
        await self.threads.stop()
        if self.threads.store is not None:
            self.threads.store.close()
        for _, probe in self._lag:
            probe.clear()
        with contextlib.suppress(KafkaError):
            await self.publisher.stop()
        await self.agents.stop()
        await self.forwarder.aclose()

    async def sample_lag(self) -> None:
        """Publish the readers' lag (``agui_consumer_lag``), at scrape time."""
        for reader, probe in self._lag:
            if reader.consumer is not None:
                await probe.sample(reader.consumer)

    @property
    def alive(self) -> bool:
        """Liveness: the background readers are still running."""
        return self.fanout.running and self.threads.running

    async def readiness(self) -> Readiness:
        """Broker reachable, topics present, fan-out positioned."""
        checks = {"broker": False, "topics": False,
                  "fanout": self.fanout.ready.is_set(),
                  "threadView": self.threads.caught_up.is_set()}
        detail = ""
        failing = self.threads.store.failing() if self.threads.store is not None else {}
        if self.threads.failure is not None:
            failing = {**failing, "thread-view": self.threads.failure}
        if failing:
            checks["threadStore"] = False
            detail = "; ".join(f"{name} {why}" for name, why in failing.items())
        try:
            async with asyncio.timeout(READY_PROBE_TIMEOUT_S):
                missing = await self.agents.missing_topics()
            checks["broker"] = True
            checks["topics"] = not missing
            if missing:
                detail = "; ".join(filter(None, [detail, "missing topics: " + ", ".join(missing)]))
        except (KafkaError, TimeoutError) as exc:
            detail = f"broker unreachable: {exc or type(exc).__name__}"
        return Readiness(all(checks.values()), checks, detail)
