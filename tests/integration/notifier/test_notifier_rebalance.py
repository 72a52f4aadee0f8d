"""Two notifiers in one group: partitions handed over and back, nothing lost, ids kept."""

from __future__ import annotations

import pytest
from notifier_support import SECRET, Threads, running
from receiver import Receiver

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def _pairs(threads: Threads, numbers: range) -> None:
    for n in numbers:
        await threads.interrupted(f"t{n}", "r1", "a")
        await threads.resumed(f"t{n}", "r2", "a")


async def test_notifiers_sharing_the_group_hand_partitions_over_without_loss(
        kafka: KafkaSettings, threads: Threads) -> None:
    async with Receiver(SECRET.encode(), delay_s=0.02) as hook, \
            running(kafka, hook.url) as first:
        await _pairs(threads, range(10))
        async with running(kafka, hook.url) as second:
            await _pairs(threads, range(10, 20))
            await hook.wait_for(lambda: len(hook.accepted) == 40)
            ready = (dict(first.failing), dict(second.failing))
            owned = (first.partitions, second.partitions)
        await _pairs(threads, range(20, 30))  # the first takes every partition back
        await hook.wait_for(lambda: len(hook.accepted) == 60)
    assert ready == ({}, {})
    assert owned in (([0], [1]), ([1], [0])), "the group shared the partitions"
    by_thread = hook.by_thread()
    assert len(by_thread) == 30
    for events in by_thread.values():
        assert [e.kind for e in events] == ["interrupted", "answered"]
    bodies: dict[str, set[bytes]] = {}
    for a in hook.attempts:
        bodies.setdefault(a.delivery_id, set()).add(a.body)
    assert len(bodies) == 60
    assert all(len(b) == 1 for b in bodies.values())
