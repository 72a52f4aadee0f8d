"""Topic administration: create the catalog idempotently and describe it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, for_code

from contracts.topics import TopicSpec
from services.kafka.clients import AIOKafkaAdminClient, NewTopic, new_admin
from services.runtime.settings import KafkaSettings


@dataclass(frozen=True, slots=True)
class TopicReport:
    """What ``ensure_topics`` did for one topic."""

    spec: TopicSpec
    created: bool
    partitions: int


async def ensure_topics(
    settings: KafkaSettings, agents: tuple[str, ...] = (), replication: int = 1
) -> list[TopicReport]:
    """Create every catalog topic that is missing; report each as created or found.

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
            response = await admin.create_topics(
                [NewTopic(s.name, s.partitions, replication, topic_configs=s.configs)
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


def _raise_failures(topic_errors: list[Any]) -> None:
    """Raise the first creation error, except 'already exists' (a concurrent creator)."""
    for name, code, *rest in topic_errors:
        if code and code != TopicAlreadyExistsError.errno:
            message = rest[0] if rest else ""
            raise for_code(code)(f"creating topic {name}: {message}")


async def _await_leaders(
    admin: AIOKafkaAdminClient, names: list[str], within_s: float = 30.0
) -> None:
    """Wait until every partition of ``names`` has a leader.

    A topic is usable only once its partitions have leaders; returning earlier
    makes the services' first fetches fail with NotLeaderForPartition noise.
    """
    deadline = asyncio.get_running_loop().time() + within_s
    while asyncio.get_running_loop().time() < deadline:
        described = await admin.describe_topics(names)
        if len(described) == len(names) and all(
            d.get("error_code", 0) == 0 and d["partitions"]
            and all(p.get("leader", -1) >= 0 for p in d["partitions"])
            for d in described
        ):
            return
        await asyncio.sleep(0.1)


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    present = set(await admin.list_topics())
    wanted = [n for n in names if n in present]
    if not wanted:
        return {}
    described = await admin.describe_topics(wanted)
    return {
        d["topic"]: len(d["partitions"]) for d in described if d.get("error_code", 0) == 0
    }


async def topics_present(settings: KafkaSettings, names: list[str]) -> bool:
    """True when every topic in ``names`` exists (readiness checks)."""
    admin = new_admin(settings)
    await admin.start()
    try:
        present = set(await admin.list_topics())
    finally:
        await admin.close()
    return all(n in present for n in names)


DESCRIBED_CONFIGS = ("cleanup.policy", "retention.ms", "min.compaction.lag.ms", "segment.ms")
"""The topic configs ``describe_catalog`` reads back from the broker."""


@dataclass(frozen=True, slots=True)
class TopicState:
    """One catalog topic as the broker has it: ``partitions`` is None when it is missing."""

    spec: TopicSpec
    partitions: int | None
    configs: dict[str, str]
    """The broker's values of ``DESCRIBED_CONFIGS`` (defaults included)."""

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
        counts = await _partition_counts(admin, [s.name for s in specs])
        configs = await _topic_configs(admin, [s.name for s in specs if s.name in counts])
    finally:
        await admin.close()
    return [TopicState(s, counts.get(s.name), configs.get(s.name, {})) for s in specs]


async def _topic_configs(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name, dict.fromkeys(DESCRIBED_CONFIGS))
         for name in names]
    )
    out: dict[str, dict[str, str]] = {}
    for response in responses:
        for error_code, message, _type, name, entries, *_ in response.resources:
            if error_code:
                raise for_code(error_code)(f"describing configs of topic {name}: {message}")
            out[name] = {entry[0]: entry[1] for entry in entries
                         if entry[0] in DESCRIBED_CONFIGS and entry[1] is not None}
    return out
