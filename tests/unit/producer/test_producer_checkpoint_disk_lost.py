"""A worker's checkpoint store whose directory vanishes while it runs: never recreated empty
(a running thread lost its checkpoint, its resume the agent's state); its checkpoints stay
in memory and the partition fails until it is handed back and rebuilt."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.kafka.partitioning import partition_for
from services.producer import checkpoint as cp
from services.producer.checkpoint_disk import CheckpointDisk
from services.state.disk import peek

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def began(thread_id: str, request_id: str = "q-r1") -> cp.ThreadCheckpoint:
    return cp.begin_run(cp.fresh(thread_id), run_id="r1", request_id=request_id,
                        agent="scripted", worker="w", still_open=[], now=NOW)


def test_a_vanished_checkpoint_store_keeps_its_checkpoints_and_fails(tmp_path: Path) -> None:
    disk = CheckpointDisk(tmp_path / "state", "agui.checkpoints", cache_mb=0, grace_s=60)
    disk.partitions = 1
    disk.stores[0], _ = disk.dir.open(0)
    path = disk.stores[0].path
    assert partition_for("old", 1) == 0
    old = began("old")
    disk.written(old)
    disk.durable(old, cp.to_bytes(old), 0, 0)
    shutil.rmtree(tmp_path / "state")
    offset = 1
    while not disk.failing() and offset < 100:  # big checkpoints until a write fails
        value = began(f"big-{offset}", request_id="x" * 300_000)
        disk.written(value)
        disk.durable(value, cp.to_bytes(value), 0, offset)
        offset += 1
    assert disk.failing(), "the store never failed"
    for n in range(3):  # later checkpoints: no reopen creates a store at the path
        new = began(f"new-{n}")
        disk.written(new)
        disk.durable(new, cp.to_bytes(new), 0, offset + n)
    assert "restart" in disk.failing().get("checkpoint-store-0", ""), (
        "a store created in place of the vanished one was taken as current")
    assert disk.get("old") is not None, "the checkpoint of a running thread is gone"
    assert disk.get("new-2") is not None
    assert {c.thread_id for c in disk.active([0])} >= {"old", "new-2"}, "recovery misses runs"
    assert "damaged" in (peek(path, 0).error or "")
    disk.close()
