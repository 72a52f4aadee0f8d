"""Restarting an idempotent producer's sequence numbers after a failed delivery left a gap."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aiokafka.producer.transaction_manager import TransactionManager

from services.kafka import sequence_gaps

pytestmark = pytest.mark.unit


async def test_sequence_numbers_start_over_under_a_new_producer_id() -> None:
    manager = TransactionManager(None, 60_000)
    manager.set_pid_and_epoch(7, 0)
    manager.increment_sequence_number("tp", 5)  # type: ignore[arg-type]
    producer = SimpleNamespace(_txn_manager=manager)
    assert sequence_gaps.restart(producer)  # type: ignore[arg-type]
    assert not manager.has_pid()
    assert manager.sequence_number("tp") == 0  # type: ignore[arg-type]
    assert not sequence_gaps.restart(producer), "already waiting for a new id"  # type: ignore[arg-type]
    manager.set_pid_and_epoch(8, 0)  # what the sender does next
    assert manager.producer_id == 8


async def test_a_transactional_producer_keeps_its_id() -> None:
    manager = TransactionManager("tx", 60_000)
    manager.set_pid_and_epoch(7, 0)
    assert not sequence_gaps.restart(SimpleNamespace(_txn_manager=manager))  # type: ignore[arg-type]
    assert manager.producer_id == 7
