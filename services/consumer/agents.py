"""Which agents this deployment serves, and whether the broker answers.

An agent is known when ``AGUI_AGENTS`` names it or a ``dispatch.<agent>``
topic exists (the producer side creates one per hosted agent). The topic
list is refreshed in the background every ``refresh_s`` seconds (never on
the request path of a known agent: listing every topic of a big cluster
costs the loop real time), and at once (at most once a second) when a
request names an agent not seen yet, so an agent deployed after this
instance started is found without a restart. The same admin
client answers the readiness probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from services.kafka.clients import AIOKafkaAdminClient, KafkaError, new_admin
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

MISS_REFRESH_S = 1.0
PROBE_TIMEOUT_S = 3.0


class AgentDirectory:
    """Known agent names and the broker's topic list."""

    def __init__(self, kafka: KafkaSettings, configured: tuple[str, ...],
                 refresh_s: float) -> None:
        self.kafka = kafka
        self.configured = frozenset(configured)
        self.refresh_s = refresh_s
        self._from_topics: frozenset[str] = frozenset()
        self._topics: frozenset[str] = frozenset()
        self._refreshed_at = float("-inf")
        self._admin: AIOKafkaAdminClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self._admin = new_admin(self.kafka, "agui-consumer-admin")
        try:
            await self._admin.start()
            await self.refresh()
        except KafkaError as exc:
            log.warning("agent directory cannot reach the broker yet: %s", exc)
        self._task = asyncio.create_task(self._refresh_periodically(),
                                         name="consumer-agent-directory")

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.refresh()
            except (KafkaError, TimeoutError) as exc:
                log.warning("could not refresh the topic list: %s", exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    @property
    def names(self) -> frozenset[str]:
        return self.configured | self._from_topics

    async def knows(self, agent: str) -> bool:
        """True when ``agent`` is served; an unknown name refreshes the topic list first."""
        if agent in self.configured:
            return True
        if agent in self._from_topics:
            return True
        if time.monotonic() - self._refreshed_at >= MISS_REFRESH_S:
            try:
                await self.refresh()
            except (KafkaError, TimeoutError) as exc:
                log.warning("could not refresh the topic list: %s", exc)
        return agent in self.names

    async def refresh(self) -> frozenset[str]:
        """Read the topic list now; returns it."""
        async with self._lock:
            if self._admin is None:
                raise KafkaError("admin client not started")
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                topics = frozenset(await self._admin.list_topics())
            prefix = self.kafka.topics.dispatch("")
            self._topics = topics
            self._from_topics = frozenset(t[len(prefix):] for t in topics
                                          if t.startswith(prefix) and len(t) > len(prefix))
            self._refreshed_at = time.monotonic()
            return topics

    async def missing_topics(self) -> list[str]:
        """Required topics the broker does not have (raises when it cannot be reached)."""
        catalog = self.kafka.topics
        required = [catalog.requests, catalog.decisions, catalog.events, catalog.threads,
                    catalog.control]
        topics = await self.refresh()
        return [t for t in required if t not in topics]
