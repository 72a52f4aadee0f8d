"""Unreadable dispatches still waiting when their partition is revoked are let go with it.

They wait their turn to be dead-lettered behind the partition's earlier ones
and a free run slot. They were kept in a map beside the scheduler, emptied
only when a job started: one revoked while queued was held for good (its
record value too, up to ``AGUI_MAX_RECORD_BYTES``), again at each rebalance
(found by review). Now the job carries it, and the scheduler drops both.
"""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace
from typing import Any

import pytest

from services.producer.agent import agent_definition
from services.producer.host import AgentHost, Unreadable
from services.producer.settings import ProducerSettings
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit


class _Consumer:
    async def commit(self, offsets: Any) -> None:
        return None


async def _agent(*_: Any) -> None:
    return None


def _unreadable_held() -> int:
    return sum(isinstance(o, Unreadable) for o in gc.get_objects())


async def test_unreadable_dispatches_queued_at_revocation_are_not_kept() -> None:
    settings = ProducerSettings(AGUI_MAX_CONCURRENT_RUNS=1)
    store = SimpleNamespace(settings=KafkaSettings(), release=lambda *a, **k: None)
    executor = SimpleNamespace(store=store, settings=settings)
    host = AgentHost("a", agent_definition(_agent), executor,  # type: ignore[arg-type]
                     take_cancel=lambda _: False, fatal=lambda _: None)
    host._consumer = _Consumer()  # type: ignore[assignment]
    host._owned = {0}
    busy = host.scheduler.offer(0, 0, "thread-busy", None)  # type: ignore[arg-type]
    assert host.scheduler.ready() == [busy]  # the one run slot is taken
    before = _unreadable_held()
    for offset in range(1, 1_001):
        host._offer(0, SimpleNamespace(  # type: ignore[arg-type]
            topic=host.topic, partition=0, offset=offset, key=b"t", value=b"{not json",
            headers=[]))
    assert _unreadable_held() - before == 1_000
    await host._release({0})
    await asyncio.sleep(0)
    gc.collect()
    assert _unreadable_held() - before == 0
