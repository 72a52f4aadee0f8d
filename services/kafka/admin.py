"""Topic administration: create the catalog idempotently and describe it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
