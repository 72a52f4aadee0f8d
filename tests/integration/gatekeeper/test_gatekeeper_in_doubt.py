"""A transaction whose commit fails is settled by Kafka, never guessed.

When ``commit_transaction`` raises, the broker may still have committed the
transaction: the connection closed with the EndTxn response in flight, as
when a broker stops. Here the real broker commits and the client is then
told it failed (``lost``), or the commit is never sent (``unsent``), or the
commit hangs, done or not (``stalled``: the transaction's deadline must end
the wait); the fault is injected into the gatekeeper's own producer, the
broker is real.
Either way every request must be decided exactly once and every run
dispatched once: a lost response must not make the gatekeeper decide the
same requests again against the thread states it held before. Each case
runs with the states in memory and in on-disk stores (``AGUI_STATE_DIR``:
an unknown outcome catches the store up from ``threads``, a committed one
is installed without moving its checkpoint).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gatekeeper_harness import Topics, check_after_a_second_wave, run_request

from services.gatekeeper.processor import Processor
from services.kafka.clients import AIOKafkaProducer, KafkaError
from services.kafka.clients import new_producer as real_new_producer
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 24


def failing_first_commit(how: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the gatekeeper's first commit fail ``how``; returns the faults still to come."""
    faults = [how]

    def new_producer(*args: Any, **kwargs: Any) -> AIOKafkaProducer:
        producer = real_new_producer(*args, **kwargs)
        commit = producer.commit_transaction

        async def commit_transaction() -> None:
            fault = faults.pop() if faults else None
            if fault == "lost":
                await commit()
                raise KafkaError("connection closed before the EndTxn response arrived")
            if fault == "unsent":
                raise KafkaError("connection closed before EndTxn was sent")
            if fault == "stalled after committing":
                await commit()
                await asyncio.Event().wait()  # the EndTxn response never arrives
            if fault == "stalled":
                await asyncio.Event().wait()  # EndTxn is never answered (nor sent)
            await commit()

        producer.commit_transaction = commit_transaction
        return producer

    monkeypatch.setattr("services.gatekeeper.partition.new_producer", new_producer)
    return faults


@pytest.mark.parametrize("store", ["memory", "disk"])
@pytest.mark.parametrize("how", ["lost", "unsent", "stalled after committing", "stalled"])
async def test_a_failed_commit_is_settled_exactly_once(
    how: str,
    store: str,
    tmp_path: Path,
    kafka: KafkaSettings,
    topics: Topics,
    in_process: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faults = failing_first_commit(how, monkeypatch)
    requests = [run_request(f"q{n}", f"t{n}", f"r{n}") for n in range(THREADS)]
    await topics.requests(requests)  # waiting before the gatekeeper starts: one batch each
    state_dir = tmp_path / "state" if store == "disk" else None
    processor: Processor = await in_process(kafka, transaction_deadline_s=3.0,
                                            state_dir=state_dir)
    await topics.until(
        lambda: len(topics.decisions) >= THREADS and len(topics.dispatches) >= THREADS,
        within=60,
        what="every request decided and dispatched",
    )
    assert faults == [], "the fault was never injected"
    await check_after_a_second_wave(topics, requests)
    assert processor.stats["transactions_failed"] == 1
    committed = how in ("lost", "stalled after committing")
    assert processor.stats["transactions_committed" if committed else "transactions_aborted"]
    assert processor.stats["transactions_stalled"] == how.startswith("stalled")


def offsets_left_open_by_a_lost_commit(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first transaction's offset commit goes to the group's coordinator without
    ``AddOffsetsToTxn`` (as when the broker skips its markers: its coordinator completes
    the transaction and never closes the offsets), then its EndTxn answer is lost."""
    faults = ["left open"]

    def new_producer(*args: Any, **kwargs: Any) -> AIOKafkaProducer:
        producer = real_new_producer(*args, **kwargs)
        send_offsets, commit = producer.send_offsets_to_transaction, producer.commit_transaction

        async def send_offsets_to_transaction(offsets: Any, group_id: Any) -> None:
            if faults:
                producer._txn_manager.consumer_group_added(group_id)  # no AddOffsetsToTxn
            await send_offsets(offsets, group_id)

        async def commit_transaction() -> None:
            await commit()
            if faults:
                faults.pop()
                raise KafkaError("connection closed before the EndTxn response arrived")

        producer.send_offsets_to_transaction = send_offsets_to_transaction
        producer.commit_transaction = commit_transaction
        return producer

    monkeypatch.setattr("services.gatekeeper.partition.new_producer", new_producer)
    return faults


async def test_offsets_a_failed_commit_left_open_are_closed_not_waited_on(
    kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Settling a failed commit reads the group's offsets back. Left open by the broker,
    they stayed unstable for ever: the gatekeeper read them again every 120 s, deciding
    nothing on any partition (found by probing, a broker SIGKILLed mid-commit). The
    settling closes the transaction as its coordinator ended it, as a takeover does."""
    faults = offsets_left_open_by_a_lost_commit(monkeypatch)
    requests = [run_request(f"q{n}", f"t{n}", f"r{n}") for n in range(THREADS)]
    await topics.requests(requests)
    processor: Processor = await in_process(kafka, transaction_deadline_s=3.0)
    await topics.until(
        lambda: len(topics.decisions) >= THREADS and len(topics.dispatches) >= THREADS,
        within=60, what="every request decided and dispatched")
    assert faults == [], "the fault was never injected"
    await check_after_a_second_wave(topics, requests)
    assert processor.stats["transactions_failed"] == 1
    assert processor.stats["transactions_committed"] == kafka.partitions  # each one's share
    assert processor.stats["hanging_closed"] == kafka.partitions
