"""Where a thread's records live: murmur2 among AGUI_PARTITIONS partitions, computed locally.

Every topic is keyed by threadId, so one thread's records sit in one
partition, and the gatekeeper holds a thread by that number across
``requests``, ``runs`` and ``threads``. The number must not depend on how
many partitions a topic has now: an operator who grows one topic
(``kafka-topics --alter --partitions``) would otherwise move the threads
whose hash lands elsewhere on it and split their state between two
partitions. So a key is hashed among ``AGUI_PARTITIONS`` (``hashed_among``:
fewer when the topic has fewer), the way Kafka's default partitioner places
it on a topic of exactly that many: the relay's producers place records so
(``ThreadPartitioner``) and its readers look for a thread there (a run's
replay, ``tail --thread``). Partitions past ``AGUI_PARTITIONS`` get none of
the relay's records.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.partitioner import DefaultPartitioner, murmur2


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` among ``partitions``."""
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    data = key.encode("utf-8") if isinstance(key, str) else key
    return int(murmur2(data) & 0x7FFFFFFF) % partitions


def hashed_among(configured: int, existing: int) -> int:
    """How many partitions a key is hashed among on a topic of ``existing`` partitions:
    ``configured`` (AGUI_PARTITIONS), or all of them when the topic has fewer."""
    return max(1, min(configured, existing))


class ThreadPartitioner:
    """aiokafka's partitioner for the relay's producers: a keyed record goes to
    ``partition_for(key, hashed_among(partitions, the topic's count))``; a record without
    a key where the default partitioner puts it."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._unkeyed = DefaultPartitioner()

    def __call__(self, key: bytes | None, all_partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        if key is None:
            return int(self._unkeyed(key, all_partitions, available))
        return all_partitions[partition_for(key, hashed_among(self.partitions,
                                                              len(all_partitions)))]
