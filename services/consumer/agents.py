"""Which agents this deployment serves, and whether the broker answers.

An agent is known when ``AGUI_AGENTS`` names it or a ``dispatch.<agent>``
topic exists (the producer side creates one per hosted agent). The cluster
is listed once, at start; after that topics are asked about by name
(``services.kafka.lookup``), so neither the request path nor the readiness
probe costs more on a cluster holding other teams' topics: a request naming
an agent not seen yet looks its topic up (each name at most once a second,
``MISS_RETRY_S``, and at most ``LOOKUPS_PER_S`` names a second), so an
agent deployed after this instance started is found without a restart (a name
that cannot be looked up now, the second's lookups spent or the broker not
answering, is ``LookupDeferred``: a 503 to ask again, never a 404 for an agent
that may exist);
every ``refresh_s`` seconds the known agents are asked about again, so one
whose topic was deleted is dropped; ``/readyz`` asks for the required
topics only. An admin client that could not start (the broker unreachable at
that moment) is made again when next needed, at most once every
``ADMIN_RETRY_S``: it never bootstraps by itself, and every lookup had been
deferred for ever once the broker was back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

from services.kafka.clients import AIOKafkaAdminClient, KafkaError, new_admin
from services.kafka.lookup import client_of, existing
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

MISS_RETRY_S = 1.0
"""How soon an agent name found missing may be asked about again."""
MAX_MISSES = 4096
"""Names remembered as missing; the memory is forgotten whole when it fills."""
LOOKUPS_PER_S = 50
"""Lookups of unknown names per second at most: a flood of made-up agent names costs
the broker no more; past it a name not known is ``LookupDeferred``."""
PROBE_TIMEOUT_S = 3.0
ADMIN_RETRY_S = 1.0
"""How soon an admin client that could not start is made and started again."""


class LookupDeferred(Exception):  # noqa: N818 - an answer: not now
    """An agent name not known here could not be looked up now: ask again later."""


class AgentDirectory:
    """Known agent names, and which required topics the broker has."""

    def __init__(self, kafka: KafkaSettings, configured: tuple[str, ...],
                 refresh_s: float) -> None:
        self.kafka = kafka
        self.configured = frozenset(configured)
        self.refresh_s = refresh_s
        self._from_topics: frozenset[str] = frozenset()
        self._missed: dict[str, float] = {}
        self._listed_at: float | None = None
        self._window = (float("-inf"), 0)
        """The current second's start and the lookups made in it."""
        self._admin: AIOKafkaAdminClient | None = None
        """The started admin client; None until one starts."""
        self._admin_tried_at = float("-inf")
        self._admin_starting = asyncio.Lock()
        """Callers meanwhile wait for the one start under way, not start more."""
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            await self._list()
        except (KafkaError, TimeoutError) as exc:
            log.warning("agent directory cannot reach the broker yet: %s", exc)
        self._task = asyncio.create_task(self._refresh_periodically(),
                                         name="consumer-agent-directory")

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.refresh()
            except (KafkaError, TimeoutError) as exc:
                log.warning("could not look up the dispatch topics: %s", exc)

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
        """True when ``agent`` is served; an unknown name is looked up first
        (``LookupDeferred`` when it cannot be now)."""
        if agent in self.configured or agent in self._from_topics:
            return True
        now = time.monotonic()
        if now - self._missed.get(agent, -MISS_RETRY_S) < MISS_RETRY_S:
            return False
        began, made = self._window
        if now - began >= 1.0:
            began, made = now, 0
        if made >= LOOKUPS_PER_S:
            raise LookupDeferred(f"{LOOKUPS_PER_S} agent names not known here were looked "
                                 "up this second already")
        self._window = (began, made + 1)
        try:
            found = await self._ask([agent])
        except (KafkaError, TimeoutError) as exc:
            log.warning("could not look up agent %r: %s", agent, exc)
            raise LookupDeferred(f"the broker did not answer a lookup: {exc}") from exc
        if not found:
            if len(self._missed) >= MAX_MISSES:
                self._missed.clear()
            self._missed[agent] = now
            return False
        self._from_topics = self._from_topics | found
        return True

    async def refresh(self) -> frozenset[str]:
        """Ask about the agents known from topics again (before ``start`` listed the
        cluster: list it); returns them."""
        if self._listed_at is None:
            return await self._list()
        asked = self._from_topics
        found = await self._ask(asked)
        self._from_topics = (self._from_topics - asked) | found  # keep names learned meanwhile
        return self._from_topics

    async def missing_topics(self) -> list[str]:
        """Required topics the broker does not have (raises when it cannot be reached)."""
        catalog = self.kafka.topics
        required = [catalog.requests, catalog.decisions, catalog.events, catalog.threads,
                    catalog.control]
        present = await self._existing(required)
        return [t for t in required if t not in present]

    async def _list(self) -> frozenset[str]:
        """List every topic once: the agents deployed before this instance started."""
        admin = await self._started_admin()
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            topics = await admin.list_topics()
        prefix = self.kafka.topics.dispatch("")
        self._from_topics = frozenset(t[len(prefix):] for t in topics
                                      if t.startswith(prefix) and len(t) > len(prefix))
        self._listed_at = time.monotonic()
        return self._from_topics

    async def _ask(self, agents: Iterable[str]) -> frozenset[str]:
        """Which of ``agents`` have a dispatch topic."""
        prefix = self.kafka.topics.dispatch("")
        topics = await self._existing(prefix + a for a in agents)
        return frozenset(t[len(prefix):] for t in topics)

    async def _existing(self, topics: Iterable[str]) -> frozenset[str]:
        admin = await self._started_admin()
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            return await existing(client_of(admin), topics)

    async def _started_admin(self) -> AIOKafkaAdminClient:
        """The admin client, made and started now if none has started (raises when it
        cannot start, or when one failed to less than ``ADMIN_RETRY_S`` ago)."""
        async with self._admin_starting:
            if self._admin is not None:
                return self._admin
            now = time.monotonic()
            if now - self._admin_tried_at < ADMIN_RETRY_S:
                raise KafkaError("the broker could not be reached a moment ago")
            self._admin_tried_at = now
            admin = new_admin(self.kafka, "agui-consumer-admin")
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    await admin.start()
            except BaseException:
                await admin.close()
                raise
            self._admin = admin
            return admin
