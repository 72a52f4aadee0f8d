"""The fan-out's first assignment: one request for every partition new to the instance.

Awaiting ``seek_to_end`` and ``position`` per partition inside the rebalance callback
took 128 round trips on 64 partitions (16 s), long enough for the group to drop the
member; the callback asks for the fresh partitions' offsets together and seeks each.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import pytest

from services.consumer import handover
from services.consumer.handover import Handover, Linger
from services.consumer.ownership import Ownership
from services.kafka.clients import TopicPartition
from services.runtime.settings import KafkaSettings

PARTITIONS = 64


class Found(NamedTuple):
    offset: int


class Consumer:
    """Counts the requests the callback awaits; partitions even ``p`` had recent records."""

    def __init__(self) -> None:
        self.awaited: list[str] = []
        self.seeks: dict[TopicPartition, int] = {}

    async def offsets_for_times(self, times: dict[TopicPartition, int]
                                ) -> dict[TopicPartition, Found | None]:
        self.awaited.append("offsets_for_times")
        return {tp: Found(10) if tp.partition % 2 == 0 else None for tp in times}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.awaited.append("end_offsets")
        return dict.fromkeys(tps, 50)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks[tp] = offset

    def __getattr__(self, name: str) -> Any:  # seek_to_end, position: one request each
        async def each(*_: object) -> int:
            self.awaited.append(name)
            return 0
        return each


async def test_a_first_assignment_asks_once_for_all_fresh_partitions_and_seeks_each() -> None:
    consumer = Consumer()
    positions: dict[TopicPartition, int] = {}
    linger = Linger(KafkaSettings(), lambda _: None, set)
    handover = Handover(consumer, Ownership("http://127.0.0.1:1"), linger,  # type: ignore[arg-type]
                        positions, set, "p.events", lambda: None)
    assigned = {TopicPartition(topic, p) for topic in ("p.events", "p.decisions")
                for p in range(PARTITIONS)}
    await handover.on_partitions_assigned(assigned)
    assert consumer.awaited == ["offsets_for_times", "end_offsets"]
    assert consumer.seeks == positions
    assert positions == {tp: 10 if tp.partition % 2 == 0 else 50 for tp in assigned}


async def test_partitions_revoked_a_moment_ago_come_back_where_they_were_with_no_request(
        ) -> None:
    consumer = Consumer()
    positions = {TopicPartition("p.events", p): 100 + p for p in range(PARTITIONS)}
    linger = Linger(KafkaSettings(), lambda _: None, set)
    handover = Handover(consumer, Ownership("http://127.0.0.1:1"), linger,  # type: ignore[arg-type]
                        positions, set, "p.events", lambda: None)
    assigned = set(positions)
    await handover.on_partitions_revoked(assigned)
    await handover.on_partitions_assigned(assigned)
    assert consumer.awaited == []
    assert positions == {TopicPartition("p.events", p): 100 + p for p in range(PARTITIONS)}


class LingerConsumer:
    """Fetches nothing, counting which partitions it was asked to read; stops slowly."""

    def __init__(self, fetched: dict[TopicPartition, int]) -> None:
        self.fetched = fetched
        self.assigned: list[TopicPartition] = []

    async def start(self) -> None:
        return None

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = tps

    def seek(self, tp: TopicPartition, offset: int) -> None:
        return None

    async def getmany(self, **_: Any) -> dict[TopicPartition, list[Any]]:
        for tp in self.assigned:
            self.fetched[tp] = self.fetched.get(tp, 0) + 1
        await asyncio.sleep(0.01)
        return {}

    async def stop(self) -> None:
        await asyncio.sleep(0.3)  # a broker answering slowly


async def test_a_partition_lost_while_the_lingering_reader_stops_is_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebalance handing the lingering reader a partition while it stopped (its last one
    let go) started no reader: the partition went unread until the next rebalance, its
    open streams sending keep-alives only (found by review)."""
    fetched: dict[TopicPartition, int] = {}
    monkeypatch.setattr(handover, "new_consumer", lambda *_, **__: LingerConsumer(fetched))
    busy = {0}
    linger = Linger(KafkaSettings(), lambda _: None, lambda: busy)
    first, second = TopicPartition("events", 0), TopicPartition("events", 1)
    linger.add(first, 5)
    await asyncio.sleep(0.05)
    busy.clear()  # the streams on partition 0 ended: the reader lets it go and stops
    await asyncio.sleep(0.05)
    busy.add(1)
    linger.add(second, 7)  # lost in a rebalance meanwhile, with a stream open on it
    await asyncio.sleep(0.6)
    await linger.stop()
    assert fetched.get(first, 0) > 0
    assert fetched.get(second, 0) > 0
