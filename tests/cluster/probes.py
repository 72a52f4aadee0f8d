"""What the cluster scenarios ask Kafka about the relay: coordinators, hanging records, pauses.

- ``transaction_coordinator``: the node coordinating a transactional id
  (FindCoordinator, key type TRANSACTION, through aiokafka's own client), so
  a scenario can SIGKILL exactly the broker the gatekeeper's transactions
  depend on.
- ``held``: per partition of a deployment's topics, the records past the
  last stable offset (high watermark minus what ``read_committed`` readers
  can reach), as ``agui-relay lag`` shows them. A transaction commits in
  milliseconds, so ``held`` that stays above zero once the load is over is a
  hanging transaction (the single broker's skipped markers).
- ``delete_topics``: a finished scenario's topics go, so the shared
  cluster's replicas to keep in sync do not pile up from one scenario to the next.
- ``longest_pause``: the largest gap between consecutive committed decisions
  (their record timestamps) inside a window: how long the relay stopped
  deciding.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaError
from faults.checker import Rec
from faults.harness import AGENTS

from services.kafka.admin import describe_catalog
from services.kafka.clients import TopicPartition, new_admin
from services.kafka.reader import TopicReader
from services.runtime.settings import KafkaSettings


async def transaction_coordinator(bootstrap: str, transactional_id: str,
                                  timeout_s: float = 30.0) -> int:
    """Kafka's node id of the transaction coordinator for ``transactional_id``."""
    deadline = time.monotonic() + timeout_s
    client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="agui-cluster-coordinator")
    await client.bootstrap()
    try:
        while True:
            try:
                node_id: int = await client.coordinator_lookup(
                    CoordinationType.TRANSACTION, transactional_id)
                return node_id
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await client.close()


async def held(settings: KafkaSettings) -> dict[TopicPartition, int]:
    """Records past the last stable offset, per partition of the catalog (zeros left out)."""
    states = await describe_catalog(settings, AGENTS)
    partitions = [TopicPartition(s.spec.name, p) for s in states
                  for p in range(s.partitions or 0)]
    async with TopicReader(settings, "agui-cluster-held") as reader:
        stable = await reader.end_offsets(partitions)
    async with TopicReader(settings, "agui-cluster-held", read_committed=False) as reader:
        high = await reader.end_offsets(partitions)
    return {tp: high[tp] - stable[tp] for tp in partitions if high[tp] > stable[tp]}


async def held_after(settings: KafkaSettings, within_s: float = 45.0) -> dict[TopicPartition, int]:
    """``held`` once it is empty, or what is still held after ``within_s`` seconds.

    Transactions open at the end of the load commit (or time out, 15 s for
    the gatekeeper's) within seconds; only a hanging one stays.
    """
    deadline = time.monotonic() + within_s
    while True:
        found = await held(settings)
        if not found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(1.0)


async def delete_topics(settings: KafkaSettings) -> None:
    """Delete the deployment's topics (the shared cluster stays small for the next scenario)."""
    admin = new_admin(settings, "agui-cluster-cleanup")
    await admin.start()
    try:
        prefix = f"{settings.topic_prefix}."
        names = [n for n in await admin.list_topics() if n.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


def longest_pause(decisions: Iterable[Rec], start_s: float, end_s: float) -> float:
    """The largest gap (s) between consecutive decisions from ``start_s`` to ``end_s``.

    Times are wall-clock seconds; the window's bounds count as points, so a
    relay that decides nothing after a fault pauses until the window ends.
    """
    inside = sorted(r.timestamp / 1000 for r in decisions if start_s <= r.timestamp / 1000 <= end_s)
    points = [start_s, *inside, end_s]
    return max(b - a for a, b in itertools.pairwise(points))
