"""Which agents exist: those whose dispatch topic does.

Topics are created by ``agui-relay topics create`` with the deployment's
agent list, so the gatekeeper learns the agents from the cluster's topic
names (``<prefix>.dispatch.<agent>``). A request for any other agent is
refused as ``invalid_input`` instead of being written to a topic nobody
reads (and that the broker would refuse to auto-create).

The cluster is listed once, at start. After that the gatekeeper asks only
by name (``services.kafka.lookup``), so what it spends does not grow with
the cluster's other topics: an agent a request names that is not known yet
is looked up before the request is decided (each name at most once per
``MISS_RETRY_S``), and every ``AGUI_GATEKEEPER_AGENTS_REFRESH_S`` seconds
the known agents are asked about again, so one whose topic was deleted is
dropped. A failed lookup keeps the last known set; only the first listing
must succeed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence

import orjson

from contracts import TopicCatalog
from contracts.headers import AGENT, header_value
from services.kafka.clients import AIOKafkaConsumer, ConsumerRecord, KafkaError, TopicPartition
from services.kafka.lookup import MAX_NAMES, client_of, existing

log = logging.getLogger(__name__)

MISS_RETRY_S = 1.0
"""How soon a name found missing may be asked about again."""
MAX_MISSES = 4096
"""Names remembered as missing; the memory is forgotten whole when it fills."""
LOOKUP_TIMEOUT_S = 3.0


def requested_agents(polled: Mapping[TopicPartition, Sequence[ConsumerRecord[bytes, bytes]]],
                     requests: str, known: frozenset[str], max_bytes: int) -> set[str]:
    """The agents that polled ``requests`` records name and ``known`` lacks.

    A record's ``agui-agent`` header names it (the consumer service writes one);
    without it the value is parsed, unless too big to be a request. Unreadable
    records name nothing: intake refuses them for what they are.
    """
    named: set[str] = set()
    for tp, records in polled.items():
        if tp.topic != requests:
            continue
        for record in records:
            agent = header_value(record.headers, AGENT)
            if agent is None:
                agent = _agent_in(record.value, max_bytes)
            if agent is not None and agent not in known:
                named.add(agent)
    return named


def _agent_in(value: bytes | None, max_bytes: int) -> str | None:
    if value is None or len(value) > max_bytes:
        return None
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    agent = raw.get("agent") if isinstance(raw, dict) else None
    return agent if isinstance(agent, str) else None


class Agents:
    """The agent names with a dispatch topic: listed at start, then asked by name."""

    def __init__(self, topics: TopicCatalog, every_s: float) -> None:
        self._head = topics.dispatch("")
        self._every_s = every_s
        self._read_at = 0.0
        self._missed: dict[str, float] = {}
        self._failed_at = float("-inf")
        self.names: frozenset[str] = frozenset()

    async def refresh(self, consumer: AIOKafkaConsumer, *, force: bool = False) -> None:
        """List the cluster (``force``: at start; errors propagate), or, when due, ask
        about the known agents again."""
        if force:
            topics = await consumer.topics()
            head = self._head
            self._set(frozenset(t[len(head):] for t in topics
                                if t.startswith(head) and t != head))
            return
        if time.monotonic() - self._read_at < self._every_s:
            return
        found = await self._ask(consumer, self.names)
        if found is not None:
            self._set(found)

    async def learn(self, consumer: AIOKafkaConsumer, named: Iterable[str]) -> None:
        """Ask about agents that requests name and that are not known, before those
        requests are decided: one request's worth of names (``MAX_NAMES``) a poll, a
        name found missing not again for ``MISS_RETRY_S``, nothing for as long after a
        lookup failed, so a flood of made-up names cannot hold decisions up."""
        now = time.monotonic()
        if now - self._failed_at < MISS_RETRY_S:
            return
        asked = [n for n in named
                 if n not in self.names and now - self._missed.get(n, -MISS_RETRY_S)
                 >= MISS_RETRY_S][:MAX_NAMES]
        if not asked:
            return
        found = await self._ask(consumer, asked)
        if found is None:
            self._failed_at = now
            return
        if len(self._missed) + len(asked) > MAX_MISSES:
            self._missed.clear()
        self._missed.update((n, now) for n in asked if n not in found)
        if found:
            self.names = self.names | found
            log.info("agents with a dispatch topic: %s", ", ".join(sorted(self.names)))

    async def _ask(self, consumer: AIOKafkaConsumer,
                   agents: Iterable[str]) -> frozenset[str] | None:
        """Which of ``agents`` have a dispatch topic; None when the broker did not say."""
        head = self._head
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                topics = await existing(client_of(consumer), (head + a for a in agents))
        except (KafkaError, TimeoutError) as exc:
            log.warning("could not look up dispatch topics (%s); keeping the last set", exc)
            return None
        return frozenset(t[len(head):] for t in topics)

    def _set(self, names: frozenset[str]) -> None:
        if names != self.names:
            log.info("agents with a dispatch topic: %s", ", ".join(sorted(names)) or "none")
        self.names, self._read_at = names, time.monotonic()
