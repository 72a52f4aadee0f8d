"""Every producer writes with acks=all: one factory builds them, and nothing else does.

On a cluster (replication 3, ``min.insync.replicas=2``) an acknowledged
record survives the loss of a broker only when the producer waited for every
in-sync replica; a client built elsewhere with aiokafka's default (``acks=1``)
would quietly weaken that, so this test finds any.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from services.kafka.clients import new_producer
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
CLIENTS = ROOT / "services" / "kafka" / "clients.py"


async def test_the_factory_builds_idempotent_acks_all_producers() -> None:
    for transactional_id in (None, "agui.test"):
        producer = new_producer(KafkaSettings(), "test", transactional_id=transactional_id)
        try:  # built, never started: aiokafka keeps these on its sender and txn manager
            assert producer._sender._acks == -1  # "all"
            assert producer._txn_manager is not None  # idempotence (and transactions) on
        finally:
            await producer.stop()


def _producer_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == "AIOKafkaProducer"
                 or getattr(node.func, "attr", None) == "AIOKafkaProducer")]


def test_no_code_outside_the_factory_builds_a_producer() -> None:
    found = {}
    for folder in ("services", "contracts", "deploy", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == CLIENTS or ".cache" in path.parts:
                continue
            lines = _producer_calls(path)
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}, f"build producers with services.kafka.clients.new_producer: {found}"
    assert _producer_calls(CLIENTS)  # the factory itself is still found by this scan
