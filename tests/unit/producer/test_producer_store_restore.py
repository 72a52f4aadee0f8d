"""Restoring checkpoints shared by several hosted agents of one worker.

Every agent's dispatch partition p maps onto checkpoints partition p, and a
worker reads each checkpoints partition once for all its agents. An agent
assigned a partition while another agent of the worker is still reading it
must wait for that read: returning at once, it found no run left open by a
dead worker, owned the partition, and ran that run's redelivered dispatch a
second time (two RUN_STARTED, a broken sequence). The broker read is
replaced by a gate so the interleaving is chosen, not raced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from aiokafka.structs import ConsumerRecord

from services.kafka.clients import AIOKafkaProducer
from services.producer import checkpoint as cp
from services.producer.store import CheckpointStore
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def left_open(thread_id: str, partition: int) -> ConsumerRecord[bytes, bytes]:
    """A checkpoint record whose run a dead worker left active."""
    value = cp.to_bytes(cp.begin_run(cp.fresh(thread_id), run_id="ap2", request_id="q",
                                     agent="approval", worker="dead", still_open=[], now=NOW))
    return ConsumerRecord(topic="p.producer-checkpoints", partition=partition, offset=0,
                          timestamp=0, timestamp_type=0, key=thread_id.encode(), value=value,
                          checksum=None, serialized_key_size=0, serialized_value_size=0,
                          headers=())


class GatedStore(CheckpointStore):
    """A store whose reads of the checkpoints topic finish when the test says."""

    def __init__(self, records: list[ConsumerRecord[bytes, bytes]]) -> None:
        super().__init__(KafkaSettings(bootstrap_servers="127.0.0.1:9", topic_prefix="p"),
                         cast(AIOKafkaProducer, None))
        self.records = records
        self.gate = asyncio.Event()
        self.reads: list[list[int]] = []

    async def _read(self, todo: list[int], since: Mapping[int, int] | None = None
                    ) -> tuple[list[ConsumerRecord[Any, Any]], int]:
        self.reads.append(list(todo))
        await self.gate.wait()
        since = since or {}
        return [r for r in self.records
                if r.partition in todo and r.offset >= since.get(r.partition, 0)], 4


async def test_a_second_owner_waits_for_the_read_in_progress() -> None:
    store = GatedStore([left_open("t-apr", 2)])
    first = asyncio.create_task(store.restore({0, 1, 2, 3}, owner="scripted"))
    await asyncio.sleep(0)  # the scripted host's read is under way
    second = asyncio.create_task(store.restore({0, 1, 2, 3}, owner="approval"))
    await asyncio.sleep(0.01)
    assert not second.done(), "returned before the partitions were read"
    store.gate.set()
    await asyncio.gather(first, second)
    assert [c.active.run_id for c in store.threads({2}) if c.active is not None] == ["ap2"]
    assert store.reads == [[0, 1, 2, 3]], "a partition was read twice"


async def test_only_the_partitions_still_being_read_are_waited_for() -> None:
    store = GatedStore([left_open("t-a", 0), left_open("t-b", 3)])
    store.gate.set()
    assert await store.restore({0}, owner="scripted") == 1
    store.gate.clear()
    first = asyncio.create_task(store.restore({1, 2}, owner="scripted"))
    await asyncio.sleep(0)
    # 0 is loaded, 1 and 2 are being read by another owner, 3 is new: read it, wait for 1, 2.
    second = asyncio.create_task(store.restore({0, 1, 2, 3}, owner="approval"))
    await asyncio.sleep(0.01)
    assert store.reads == [[0], [1, 2], [3]]
    assert not second.done()
    store.gate.set()
    await asyncio.gather(first, second)
    assert {c.thread_id for c in store.threads({0, 1, 2, 3})} == {"t-a", "t-b"}


async def test_a_failed_read_fails_every_owner_waiting_for_it() -> None:
    store = GatedStore([])

    async def broken(todo: list[int]) -> tuple[list[ConsumerRecord[Any, Any]], int]:
        await store.gate.wait()
        raise ConnectionError("broker gone")

    store._read = broken  # type: ignore[method-assign]
    first = asyncio.create_task(store.restore({0}, owner="scripted"))
    await asyncio.sleep(0)
    second = asyncio.create_task(store.restore({0}, owner="approval"))
    await asyncio.sleep(0)
    store.gate.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert [type(r) for r in results] == [ConnectionError, ConnectionError]
