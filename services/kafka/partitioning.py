"""Where a key lives: Kafka's default (murmur2) partitioner, computed locally.

Every topic is keyed by threadId, so one thread's records sit in one
partition. Readers that want a single thread (a run's replay, ``tail
--thread``) compute that partition here, exactly as the Java client and
aiokafka's producer place the record, and read only it.
"""

from __future__ import annotations

from aiokafka.partitioner import murmur2


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` among ``partitions``."""
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    data = key.encode("utf-8") if isinstance(key, str) else key
    return int(murmur2(data) & 0x7FFFFFFF) % partitions
