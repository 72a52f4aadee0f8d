"""Consumer groups and their committed offsets, for lag reports.

``committed_offsets`` asks the cluster for every consumer group and each
group's committed offset per partition, keeping the partitions of topics
the caller cares about (a deployment's prefix), so ``agui-relay lag`` can
set them against the end offsets.
"""

from __future__ import annotations

from collections.abc import Callable

from services.kafka.clients import TopicPartition, new_admin
from services.runtime.settings import KafkaSettings

__all__ = ["committed_offsets"]


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
