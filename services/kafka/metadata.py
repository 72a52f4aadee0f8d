"""Topic metadata a reader needs before it assigns partitions by hand.

Readers that assign partitions themselves (no consumer group: the consumer
service's fan-out, replay, thread view) need each topic's partition count;
aiokafka's consumer only knows topics it already tracks, so it is asked of
the cluster through an admin client here.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.kafka.clients import new_admin
from services.runtime.settings import KafkaSettings


async def partition_counts(settings: KafkaSettings, names: Sequence[str]) -> dict[str, int]:
    """Partition count of each topic in ``names`` that exists (absent ones are left out)."""
    admin = new_admin(settings, "agui-relay-metadata")
    await admin.start()
    try:
        present = set(await admin.list_topics())
        wanted = [n for n in names if n in present]
        if not wanted:
            return {}
        described = await admin.describe_topics(wanted)
    finally:
        await admin.close()
    return {d["topic"]: len(d["partitions"]) for d in described
            if d.get("error_code", 0) == 0 and d.get("partitions")}
