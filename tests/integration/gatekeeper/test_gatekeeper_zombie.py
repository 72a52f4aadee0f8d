"""A gatekeeper the group has moved past cannot commit what it decided.

Gatekeeper A decides its first batch and is held just before committing it
(as if frozen by a long pause). Meanwhile A's membership ends (it leaves the
group, as an expired session would), and gatekeeper B takes every partition
and decides the same requests. Then A wakes up and commits. Each instance
commits all its partitions with one producer whose transactional id names
them, so:

- when B's id differs from A's (as whenever the successor's assignment
  differs from the zombie's; made so here by giving B's producer another
  prefix), only the group generation carried by A's offsets (KIP-447) tells
  A's transaction from B's: the group must refuse A's offsets;
- when B's id is A's (B owns exactly what A owned), B's ``init_transactions``
  fences A's producer.

Either way A's transaction must not commit, A must not fence B back, and
every request must still be decided exactly once and every run dispatched
once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from gatekeeper_harness import (
    Topics,
    check_after_a_second_wave,
    run_request,
    successor_producers,
)

from services.gatekeeper.processor import Processor
from services.kafka.clients import AIOKafkaProducer, TopicPartition
from services.kafka.transactions import commit_outputs
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 24


@pytest.mark.parametrize(
    ("successor_id", "stat"),
    [("another", "transactions_refused"), ("the same", "transactions_fenced")],
)
async def test_a_gatekeeper_the_group_moved_past_cannot_commit(
    successor_id: str,
    stat: str,
    kafka: KafkaSettings,
    topics: Topics,
    in_process: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held, wake = asyncio.Event(), asyncio.Event()
    first: list[object] = []

    async def paused_first_commit(
        producer: AIOKafkaProducer,
        records: Any,
        offsets: dict[TopicPartition, int],
        group: Any,
        **options: Any,
    ) -> dict[TopicPartition, int]:
        if not first:  # A's first transaction, decided and about to commit
            first.append(group)
            held.set()
            await wake.wait()
        return await commit_outputs(producer, records, offsets, group, **options)

    for module in ("commit", "takeover"):  # a batch's transaction, offsets read past on release
        monkeypatch.setattr(f"services.gatekeeper.{module}.commit_outputs", paused_first_commit)
    successor_producers(monkeypatch, lambda: held.is_set() and successor_id == "another")
    requests = [run_request(f"q{n}", f"t{n}", f"r{n}") for n in range(THREADS)]
    await topics.requests(requests)
    a: Processor = await in_process(kafka)
    await asyncio.wait_for(held.wait(), 30)
    await a.state.require_consumer()._coordinator.maybe_leave_group()  # A's session is over

    b: Processor = await in_process(kafka)
    assert b.partitions == list(range(kafka.partitions))
    await topics.until(
        lambda: len(topics.decisions) >= THREADS and len(topics.dispatches) >= THREADS,
        within=60,
        what="B deciding and dispatching every request",
    )
    wake.set()  # A commits the batch it decided before the group moved on
    await topics.until(lambda: a.stats[stat] >= 1, within=30, what=f"A's {stat}")
    await check_after_a_second_wave(topics, requests)
    assert a.stats[stat] == 1
    assert a.stats["transactions_failed"] == 0
    assert b.stats["transactions_failed"] == 0
    assert b.stats["transactions_fenced"] == 0
