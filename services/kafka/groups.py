"""Consumer groups: their committed offsets, for lag reports, and their membership.

``committed_offsets`` asks the cluster for every consumer group and each
group's committed offset per partition, keeping the partitions of topics
the caller cares about (a deployment's prefix), so ``agui-relay lag`` can
set them against the end offsets. ``membership`` is a group's state and
member count as its coordinator tells them (whether a member left, or a
restarted static member took its predecessor's place).
"""

from __future__ import annotations

from collections.abc import Callable

from services.kafka.clients import KafkaError, TopicPartition, new_admin
from services.runtime.settings import KafkaSettings

__all__ = ["committed_offsets", "membership"]


async def committed_offsets(
    settings: KafkaSettings, wanted: Callable[[str], bool]
) -> dict[str, dict[TopicPartition, int]]:
    """group id → {partition: committed offset} for topics where ``wanted(topic)``.

    Groups with no committed offset on a wanted topic are left out.
    """
    admin = new_admin(settings, "agui-relay-lag")
    await admin.start()
    try:
        out: dict[str, dict[TopicPartition, int]] = {}
        for group in sorted({g[0] for g in await admin.list_consumer_groups()}):
            offsets = await admin.list_consumer_group_offsets(group)
            kept = {TopicPartition(tp.topic, tp.partition): int(meta.offset)
                    for tp, meta in offsets.items() if wanted(tp.topic) and meta.offset >= 0}
            if kept:
                out[group] = kept
        return out
    finally:
        await admin.close()


async def membership(settings: KafkaSettings, group: str) -> tuple[str, int]:
    """The group's state (``Stable``, ``Empty``, ...) and how many members it has."""
    admin = new_admin(settings, "agui-relay-groups")
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    (described,) = response.groups
    error_code, _group_id, state, *rest = described
    if error_code:
        raise KafkaError(f"describing group {group!r} failed: error {error_code}")
    members = next(field for field in rest if isinstance(field, list))
    return str(state), len(members)
