"""Topic administration: create the catalog idempotently and describe it.

Topics are replicated as the cluster allows: on a cluster of three brokers or
more every topic gets 3 replicas and ``min.insync.replicas=2`` (with the
producers' ``acks=all``, an acknowledged record survives the loss of any one
broker, and writes go on while one is down); on one broker, 1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, for_code
from aiokafka.protocol.offset import OffsetRequest, OffsetResetStrategy

from contracts.topics import TopicSpec
from services.kafka.clients import AIOKafkaAdminClient, KafkaError, NewTopic, new_admin
from services.kafka.lookup import client_of, existing
from services.runtime.settings import ConfigurationError, KafkaSettings

log = logging.getLogger(__name__)

LATEST_OFFSET = OffsetResetStrategy.LATEST
"""ListOffsets' timestamp for "the end"."""


@dataclass(frozen=True, slots=True)
class TopicReport:
    """What ``ensure_topics`` did for one topic."""

    spec: TopicSpec
    created: bool
    partitions: int


@dataclass(frozen=True, slots=True)
class Replication:
    """How many copies each new topic gets, and how many must have a write (acks=all)."""

    factor: int
    min_insync: int | None = None
    """``min.insync.replicas`` set on the topic; None leaves the broker's default."""

    @classmethod
    def for_cluster(cls, brokers: int, default_factor: int = 1) -> Replication:
        """3 replicas and min ISR 2 on a cluster of 3 brokers or more, else 1.

        ``brokers`` are the live ones in the cluster metadata; ``default_factor``
        is the brokers' own ``default.replication.factor``, so a cluster with a
        broker down still counts as one (creating then fails loudly rather than
        making topics that are not replicated).
        """
        return cls(3, 2) if max(brokers, default_factor) >= 3 else cls(1)

    def configs(self, base: Mapping[str, str]) -> dict[str, str]:
        """A topic's configs with this replication's ``min.insync.replicas``."""
        if self.min_insync is None:
            return dict(base)
        return {**base, "min.insync.replicas": str(self.min_insync)}


async def ensure_topics(
    settings: KafkaSettings, agents: tuple[str, ...] = (),
    replication: Replication | None = None,
) -> list[TopicReport]:
    """Create every catalog topic that is missing; report each as created or found.

    ``replication`` defaults to what the cluster allows (``Replication.for_cluster``).
    An existing topic is left as it is (its partition count is reported, so a
    caller can see when it differs from the catalog).
    """
    specs = settings.topics.specs(agents)
    admin = new_admin(settings)
    await admin.start()
    try:
        existing = await _partition_counts(admin, [s.name for s in specs])
        missing = [s for s in specs if s.name not in existing]
        if missing:
            chosen = replication or await cluster_replication(admin)
            response = await admin.create_topics(
                [NewTopic(s.name, s.partitions, chosen.factor,
                          topic_configs=chosen.configs(s.configs))
                 for s in missing]
            )
            _raise_failures(response.topic_errors)
            await _await_leaders(admin, [s.name for s in missing])
        counts = await _partition_counts(admin, [s.name for s in specs])
    finally:
        await admin.close()
    return [
        TopicReport(s, s.name not in existing, counts.get(s.name, 0)) for s in specs
    ]


async def check_record_limit(settings: KafkaSettings, names: tuple[str, ...]) -> None:
    """Raise ``ConfigurationError`` when a topic among ``names`` takes smaller records
    than ``AGUI_MAX_RECORD_BYTES``: a record between the two passes every service's own
    check and is refused by the broker, which an idempotent producer does not survive
    (the worker stopped, every run on it with it)."""
    admin = new_admin(settings, "agui-relay-limits")
    await admin.start()
    try:
        configs = await _topic_configs(admin, list(names), (MAX_MESSAGE_BYTES,))
    finally:
        await admin.close()
    low = {name: int(c[MAX_MESSAGE_BYTES]) for name, c in configs.items()
           if MAX_MESSAGE_BYTES in c and int(c[MAX_MESSAGE_BYTES]) < settings.max_record_bytes}
    if low:
        shown = ", ".join(f"{name} ({size:,})" for name, size in sorted(low.items()))
        raise ConfigurationError(
            f"AGUI_MAX_RECORD_BYTES={settings.max_record_bytes:,} is over the "
            f"{MAX_MESSAGE_BYTES} of {shown}: lower it, or raise the topics' limit")


CLEANUP_POLICY = "cleanup.policy"


async def check_compacted(settings: KafkaSettings, names: tuple[str, ...]) -> None:
    """Raise ``ConfigurationError`` when a topic among ``names`` (those that exist) is not
    compacted. Each is a changelog a store restores every live record from: under
    ``delete`` retention removes live records, and a store whose checkpoint the log's
    start has passed is rebuilt from what is left (the gatekeeper and the consumer
    service wiped whole stores so when ``threads`` was switched to ``delete``: found
    by probing). Refused at start, before any store is restored."""
    admin = new_admin(settings, "agui-relay-policies")
    await admin.start()
    try:
        present = await existing(client_of(admin), names)
        configs = await _topic_configs(admin, [n for n in names if n in present],
                                       (CLEANUP_POLICY,))
    finally:
        await admin.close()
    wrong = {name: c.get(CLEANUP_POLICY, "") for name, c in configs.items()
             if "compact" not in c.get(CLEANUP_POLICY, "").split(",")}
    if wrong:
        shown = ", ".join(f"{name} ({CLEANUP_POLICY}={policy or 'unset'})"
                          for name, policy in sorted(wrong.items()))
        raise ConfigurationError(
            f"{shown}: a changelog must be compacted, or retention removes live state "
            "and the stores restored from it lose it; set it back with `kafka-configs "
            f"--alter --entity-type topics --entity-name {min(wrong)} --add-config "
            f"{CLEANUP_POLICY}=compact` and start again")


async def delete_prefixed(settings: KafkaSettings, prefixes: tuple[str, ...]) -> list[str]:
    """Delete every topic whose name starts with one of ``prefixes`` (a hundred per
    request); their names. For throwaway deployments: benchmarks', tests'."""
    if not prefixes:
        return []
    admin = new_admin(settings, "agui-relay-cleanup")
    await admin.start()
    try:
        names = sorted(t for t in await admin.list_topics() if t.startswith(prefixes))
        for start in range(0, len(names), 100):
            await admin.delete_topics(names[start:start + 100])
    finally:
        await admin.close()
    return names


def delete_prefixed_now(settings: KafkaSettings, prefixes: tuple[str, ...]) -> list[str]:
    """``delete_prefixed`` from synchronous code, on a thread and an event loop of its own,
    so it may be called where an event loop is running (a fixture, a benchmark's exit)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, delete_prefixed(settings, prefixes)).result()


async def cluster_replication(admin: AIOKafkaAdminClient) -> Replication:
    """The replication this cluster allows, from its metadata and a broker's defaults."""
    brokers = (await admin.describe_cluster())["brokers"]
    if not brokers:
        return Replication(1)
    node = str(brokers[0]["node_id"])
    key = "default.replication.factor"
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, node, {key: None})])
    default = 1
    for response in responses:
        for error_code, message, _type, _name, entries, *_ in response.resources:
            if error_code:
                raise for_code(error_code)(f"describing broker {node}'s configs: {message}")
            default = max([default, *(int(e[1]) for e in entries if e[0] == key and e[1])])
    return Replication.for_cluster(len(brokers), default)


def _raise_failures(topic_errors: list[Any]) -> None:
    """Raise the first creation error, except 'already exists' (a concurrent creator)."""
    for name, code, *rest in topic_errors:
        if code and code != TopicAlreadyExistsError.errno:
            message = rest[0] if rest else ""
            raise for_code(code)(f"creating topic {name}: {message}")


async def _await_leaders(
    admin: AIOKafkaAdminClient, names: list[str], within_s: float = 30.0
) -> None:
    """Wait until every partition of ``names`` has a leader that serves it.

    A topic is usable only once its partitions have leaders; returning earlier
    makes the services' first fetches fail with NotLeaderForPartition noise.
    The metadata names a broker leader a moment before that broker serves the
    partition (its metadata cache is updated before its replica manager), so
    each leader is also asked for its partitions' end offsets until it answers
    every one without an error. A broker still not serving them after ``within_s``
    is logged, naming the topics (readers then retry), rather than passed silently.
    """
    deadline = asyncio.get_running_loop().time() + within_s
    waiting = names
    while asyncio.get_running_loop().time() < deadline:
        described = await admin.describe_topics(names)
        led = {d["topic"] for d in described if d.get("error_code", 0) == 0 and d["partitions"]
               and all(p.get("leader", -1) >= 0 for p in d["partitions"])}
        waiting = [n for n in names if n not in led]
        if not waiting and await _leaders_serve(admin, described):
            return
        await asyncio.sleep(0.1)
    log.warning("topics created %.0f s ago are not served yet (%s): their first readers "
                "will retry until the brokers serve them; is the cluster overloaded?",
                within_s, ", ".join(waiting or names))


async def _leaders_serve(admin: AIOKafkaAdminClient, described: list[dict[str, Any]]) -> bool:
    """True when each partition's leader answers a ListOffsets for it with no error."""
    asked: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for d in described:
        for p in d["partitions"]:
            asked.setdefault(p["leader"], {}).setdefault(d["topic"], []).append(
                (p["partition"], LATEST_OFFSET))
    client = client_of(admin)
    for node, topics in asked.items():
        try:
            response = await client.send(node, OffsetRequest(-1, 0, list(topics.items())))
        except KafkaError:
            return False
        if any(error for _topic, parts in response.topics for _p, error, *_ in parts):
            return False
    return True


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    return {name: len(parts) for name, parts in (await _partitions(admin, names)).items()}


async def _partitions(
    admin: AIOKafkaAdminClient, names: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """The partitions (leader, replicas, isr) of each of ``names`` that exists."""
    present = set(await admin.list_topics())
    wanted = [n for n in names if n in present]
    if not wanted:
        return {}
    described = await admin.describe_topics(wanted)
    return {d["topic"]: list(d["partitions"]) for d in described if d.get("error_code", 0) == 0}


MAX_MESSAGE_BYTES = "max.message.bytes"
DESCRIBED_CONFIGS = ("cleanup.policy", "retention.ms", "min.compaction.lag.ms", "segment.ms",
                     "min.insync.replicas")
"""The topic configs ``describe_catalog`` reads back from the broker."""


@dataclass(frozen=True, slots=True)
class TopicState:
    """One catalog topic as the broker has it: ``partitions`` is None when it is missing."""

    spec: TopicSpec
    partitions: int | None
    configs: dict[str, str]
    """The broker's values of ``DESCRIBED_CONFIGS`` (defaults included)."""
    replicas: int | None = None
    """Replicas of its first partition (the replication factor); None when unknown."""

    @property
    def exists(self) -> bool:
        return self.partitions is not None


async def describe_catalog(
    settings: KafkaSettings, agents: tuple[str, ...] = ()
) -> list[TopicState]:
    """Every catalog topic with its partition count and configs as the broker reports them."""
    specs = settings.topics.specs(agents)
    admin = new_admin(settings)
    await admin.start()
    try:
        partitions = await _partitions(admin, [s.name for s in specs])
        configs = await _topic_configs(admin, [s.name for s in specs if s.name in partitions])
    finally:
        await admin.close()
    return [TopicState(s, len(partitions[s.name]) if s.name in partitions else None,
                       configs.get(s.name, {}), _replication_factor(partitions.get(s.name)))
            for s in specs]


def _replication_factor(partitions: list[dict[str, Any]] | None) -> int | None:
    if not partitions:
        return None
    return len(partitions[0].get("replicas", ()))


async def _topic_configs(admin: AIOKafkaAdminClient, names: list[str],
                         keys: tuple[str, ...] = DESCRIBED_CONFIGS) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name, dict.fromkeys(keys)) for name in names]
    )
    out: dict[str, dict[str, str]] = {}
    for response in responses:
        for error_code, message, _type, name, entries, *_ in response.resources:
            if error_code:
                raise for_code(error_code)(f"describing configs of topic {name}: {message}")
            out[name] = {entry[0]: entry[1] for entry in entries
                         if entry[0] in keys and entry[1] is not None}
    return out
