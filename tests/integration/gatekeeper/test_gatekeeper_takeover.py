"""Taking over from an instance that died mid-transaction costs no group membership.

Gatekeeper A decides its first batch, writes it with its offsets, and its
commit never returns (A is frozen); then A's membership ends. Gatekeeper B
takes every partition under another transactional id, so nothing fences
A's open transaction: B's takeover must wait until the broker times it out
(15 s) before the group's offsets are stable and the thread states
complete. That is longer than B's session timeout (6 s here). aiokafka
sends no heartbeat while a rebalance callback runs, so a takeover done
inside the callback would get B thrown out of the group and the partitions
handed round again; B must instead stay a member through the wait, take
the partitions over once, and decide every request exactly once.
"""

from __future__ import annotations

import asyncio
import time
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
from services.kafka.clients import AIOKafkaProducer, KafkaError
from services.kafka.clients import new_producer as real_new_producer
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 24
SESSION_TIMEOUT_MS = 6000


async def test_a_long_takeover_keeps_the_membership(
    kafka: KafkaSettings,
    topics: Topics,
    in_process: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen, thaw = asyncio.Event(), asyncio.Event()

    def new_producer(*args: Any, **kwargs: Any) -> AIOKafkaProducer:
        producer = real_new_producer(*args, **kwargs)
        commit = producer.commit_transaction

        async def commit_transaction() -> None:
            if frozen.is_set():
                await commit()
                return
            frozen.set()  # A's first commit: records and offsets are in, EndTxn is not sent
            await thaw.wait()
            raise KafkaError("A woke up after the test")

        producer.commit_transaction = commit_transaction  # type: ignore[method-assign]
        return producer

    monkeypatch.setattr("services.gatekeeper.partition.new_producer", new_producer)
    successor_producers(monkeypatch, frozen.is_set)  # B's id does not fence A's transaction
    requests = [run_request(f"q{n}", f"t{n}", f"r{n}") for n in range(THREADS)]
    await topics.requests(requests)
    a: Processor = await in_process(kafka, transaction_deadline_s=300.0)
    await asyncio.wait_for(frozen.wait(), 30)
    await a.state.require_consumer()._coordinator.maybe_leave_group()  # A's session is over

    started = time.monotonic()
    b: Processor = await in_process(kafka, session_timeout_ms=SESSION_TIMEOUT_MS)
    took = time.monotonic() - started
    assert b.partitions == list(range(kafka.partitions))
    assert took * 1000 > SESSION_TIMEOUT_MS, f"the takeover waited only {took:.1f} s"
    try:
        await check_after_a_second_wave(topics, requests)
    finally:
        thaw.set()
    assert b.stats["takeovers"] == 1, "B lost its membership during the takeover"
    assert b.stats["transactions_refused"] == 0
    assert b.stats["transactions_failed"] == 0
