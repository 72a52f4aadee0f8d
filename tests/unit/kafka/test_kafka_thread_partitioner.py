"""A thread's records stay among AGUI_PARTITIONS partitions however far a topic grows.

The gatekeeper holds a thread by one partition number across ``requests``,
``runs`` and ``threads``; a producer hashing among a topic's current count
moved the threads of a grown topic and split their state.
"""

from __future__ import annotations

import pytest
from aiokafka.partitioner import DefaultPartitioner

from services.kafka.clients import new_producer
from services.kafka.partitioning import ThreadPartitioner, hashed_among, partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

KEYS = [f"thread-{i}".encode() for i in range(500)]


def test_a_key_stays_on_its_partition_when_the_topic_grows() -> None:
    place = ThreadPartitioner(8)
    for key in KEYS:
        assert place(key, list(range(12)), list(range(12))) == partition_for(key, 8)
        assert place(key, list(range(64)), []) == partition_for(key, 8)


def test_on_a_topic_of_the_configured_count_or_fewer_it_is_the_default_partitioner() -> None:
    place, default = ThreadPartitioner(8), DefaultPartitioner()
    for count in (1, 3, 8):
        every = list(range(count))
        assert [place(k, every, every) for k in KEYS] == [default(k, every, every) for k in KEYS]


def test_a_record_without_a_key_goes_to_an_available_partition() -> None:
    assert ThreadPartitioner(8)(None, list(range(12)), [10]) == 10


def test_hashed_among_is_the_configured_count_unless_the_topic_has_fewer() -> None:
    assert hashed_among(8, 12) == 8
    assert hashed_among(8, 8) == 8
    assert hashed_among(8, 4) == 4


async def test_every_producer_of_the_relay_places_threads_so() -> None:
    producer = new_producer(KafkaSettings(partitions=6), "test")
    try:  # built, never started
        assert isinstance(producer._partitioner, ThreadPartitioner)
        assert producer._partitioner.partitions == 6
    finally:
        await producer.stop()
