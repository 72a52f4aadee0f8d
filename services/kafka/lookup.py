"""Which of some named topics exist: asked by name, never by listing the cluster.

Listing every topic (a metadata request for all of them) costs the asker in
proportion to the cluster, not to the deployment: on a broker holding 1,915
topics aiokafka spent 165-186 ms of CPU parsing each answer, with the event
loop blocked meanwhile. Asking for the few names a service cares about
costs the same on any cluster. The request says
``allow_auto_topic_creation=False``: aiokafka's default (``True``) would let
a cluster with ``auto.create.topics.enable`` (Kafka's default) create a
topic for every name asked about, a hostile agent name included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Iterable, Sequence

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest

from services.kafka.clients import AIOKafkaAdminClient, AIOKafkaConsumer, KafkaError, new_admin
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""Kafka's rule for topic names: a name outside it cannot exist, so it is not asked."""
MAX_NAMES = 100
"""Names asked in one request; the rest of a longer list are asked in further requests."""
ABSENT = frozenset({3, 17, 29})
"""Errors that say a topic is not there for this client: unknown, invalid name, not
authorized. Any other (a leader being elected, say) is about a topic that exists."""


def client_of(owner: AIOKafkaConsumer | AIOKafkaAdminClient) -> AIOKafkaClient:
    """The network client a consumer or admin client sends its requests through."""
    client: AIOKafkaClient = owner._client
    return client


def lookup_request(names: list[str]) -> MetadataRequest:
    """A metadata request for ``names`` only, which creates none of them."""
    return MetadataRequest(names, allow_auto_topic_creation=False)


async def existing(client: AIOKafkaClient, names: Iterable[str]) -> frozenset[str]:
    """The topics among ``names`` that exist (raises ``KafkaError`` when unanswered)."""
    legal = sorted({n for n in names if LEGAL_TOPIC.fullmatch(n)})
    found: set[str] = set()
    for start in range(0, len(legal), MAX_NAMES):
        node = client.get_random_node()
        if node is None:
            raise KafkaError("no broker is known to ask for topic metadata")
        response = await client.send(node, lookup_request(legal[start:start + MAX_NAMES]))
        found.update(t["topic"] for t in response.to_object()["topics"]
                     if t["error_code"] not in ABSENT)
    return frozenset(found)


async def broker_answers(settings: KafkaSettings) -> KafkaError | None:
    """None when a broker of ``KAFKA_BOOTSTRAP_SERVERS`` answers (a client bootstraps),
    else why not."""
    admin = new_admin(settings, "agui-broker-check")
    try:
        await admin.start()
    except KafkaError as exc:
        return exc
    finally:
        await admin.close()
    return None


class BrokerWatch:
    """Whether a broker answers, asked at most every ``every_s`` and waited for at most
    ``timeout_s``: the ``broker`` check of a Kafka-only service's ``/readyz``. Their
    readiness said only whether the group was joined once, and stayed 200 through a
    whole outage (found by probing)."""

    def __init__(self, settings: KafkaSettings, every_s: float = 5.0,
                 timeout_s: float = 3.0) -> None:
        self.settings = settings
        self.every_s = every_s
        self.timeout_s = timeout_s
        self._asked = float("-inf")
        self._why: str | None = None
        self._lock = asyncio.Lock()

    async def why_not(self) -> str | None:
        """None when a broker answered lately, else why not."""
        async with self._lock:
            if time.monotonic() - self._asked >= self.every_s:
                try:
                    async with asyncio.timeout(self.timeout_s):
                        exc = await broker_answers(self.settings)
                    why = None if exc is None else str(exc) or type(exc).__name__
                except TimeoutError:
                    why = f"no answer within {self.timeout_s:g} s"
                self._why = (None if why is None else
                             f"no broker at {self.settings.bootstrap_servers} answers: {why}")
                self._asked = time.monotonic()
            return self._why


async def wait_for_broker(settings: KafkaSettings, stop: asyncio.Event, *,
                          every_s: float = 2.0, remind_s: float = 30.0) -> bool:
    """Wait until a broker answers; False when ``stop`` is set first.

    A service started while the cluster is away (an instance replaced during an
    outage, a relay started before its broker) said nothing and exited within
    seconds with aiokafka's "Unable to bootstrap" traceback, and under
    ``agui-relay up`` one exiting stops them all (found by probing). It says once
    that it waits, and again every ``remind_s``, not ready meanwhile.
    """
    reminded = float("-inf")
    while True:
        why = await broker_answers(settings)
        if why is None:
            if reminded > float("-inf"):
                log.warning("the broker at %s answers: starting", settings.bootstrap_servers)
            return True
        now = time.monotonic()
        if now - reminded >= remind_s:
            log.warning("waiting for the broker at %s (KAFKA_BOOTSTRAP_SERVERS): %s; not "
                        "ready until it answers", settings.bootstrap_servers, why)
            reminded = now
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        if stop.is_set():
            return False


async def wait_for_topics(settings: KafkaSettings, names: Sequence[str], stop: asyncio.Event,
                          *, every_s: float = 2.0, remind_s: float = 30.0) -> bool:
    """Wait until every topic in ``names`` exists; False when ``stop`` is set first.

    A service started before its topics (``agui-relay topics create`` not run
    yet, or run with another prefix) says once which are missing and how to
    create them, and again every ``remind_s``, instead of letting its Kafka
    client log each failed metadata refresh (ten a second per topic) and give
    up with a traceback.
    """
    admin = new_admin(settings, "agui-topic-check")
    reminded = float("-inf")
    try:
        await admin.start()
        while True:
            try:
                missing = sorted(set(names) - await existing(client_of(admin), names))
            except KafkaError as exc:
                missing, why = list(names), f"the broker did not answer ({exc})"
            else:
                why = "they do not exist"
            if not missing:
                return True
            now = time.monotonic()
            if now - reminded >= remind_s:
                log.warning("waiting for topics %s: %s; create them with `agui-relay topics "
                            "create` (AGUI_TOPIC_PREFIX=%s)", ", ".join(missing), why,
                            settings.topic_prefix)
                reminded = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            if stop.is_set():
                return False
    finally:
        await admin.close()
