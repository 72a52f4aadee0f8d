"""Which agents exist: those whose dispatch topic does.

Topics are created by ``agui-relay topics create`` with the deployment's
agent list, so the gatekeeper learns the agents from the cluster's topic
names (``<prefix>.dispatch.<agent>``) at start and every
``AGUI_GATEKEEPER_AGENTS_REFRESH_S`` seconds. A request for any other agent
is refused as ``invalid_input`` instead of being written to a topic nobody
reads (and that the broker would refuse to auto-create). A failed refresh
keeps the last known set; only the first read must succeed.
"""

from __future__ import annotations

import logging
import time

from contracts import TopicCatalog
from services.kafka.clients import AIOKafkaConsumer, KafkaError

log = logging.getLogger(__name__)


class Agents:
    """The agent names with a dispatch topic, refreshed from cluster metadata."""

    def __init__(self, topics: TopicCatalog, every_s: float) -> None:
        self._head = topics.dispatch("")
        self._every_s = every_s
        self._read_at = 0.0
        self.names: frozenset[str] = frozenset()

    async def refresh(self, consumer: AIOKafkaConsumer, *, force: bool = False) -> None:
        """Read the topic names again when due (or ``force``d; then errors propagate)."""
        if not force and time.monotonic() - self._read_at < self._every_s:
            return
        try:
            topics = await consumer.topics()
        except KafkaError:
            if force:
                raise
            log.warning("could not list dispatch topics; keeping the last set", exc_info=True)
            return
        head = self._head
        names = frozenset(t[len(head) :] for t in topics if t.startswith(head) and t != head)
        if names != self.names:
            log.info("agents with a dispatch topic: %s", ", ".join(sorted(names)) or "none")
        self.names, self._read_at = names, time.monotonic()
