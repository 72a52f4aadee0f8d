"""``CheckpointDisk`` on real store files: a checkpoint is read from memory until its record
is acknowledged, then from the store with the offset after it (only when no other writer's
record came between); runs active are marked; a partition read again keeps the threads
written here meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.kafka.partitioning import partition_for
from services.producer import checkpoint as cp
from services.producer.checkpoint_disk import CheckpointDisk, active_raw, changes

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, tzinfo=UTC)
PARTITIONS = 4


def began(thread_id: str, run_id: str) -> cp.ThreadCheckpoint:
    return cp.begin_run(cp.fresh(thread_id), run_id=run_id, request_id=f"q-{run_id}",
                        agent="scripted", worker="w", still_open=[], now=NOW)


def owning(tmp_path: Path, *partitions: int) -> CheckpointDisk:
    disk = CheckpointDisk(tmp_path, "agui.checkpoints", cache_mb=1, grace_s=60)
    disk.partitions = PARTITIONS
    for p in partitions:
        disk.stores[p], _ = disk.dir.open(p)
    return disk


def test_a_checkpoint_is_read_from_memory_until_acknowledged_then_from_the_store(
        tmp_path: Path) -> None:
    disk = owning(tmp_path, *range(PARTITIONS))
    value = began("t1", "r1")
    p = partition_for("t1", PARTITIONS)
    disk.stores[p].write((), 41)  # restored up to 41
    disk.written(value)
    assert disk.get("t1") is value
    assert disk.stores[p].get(b"t1") is None
    disk.durable(value, cp.to_bytes(value), p, 41)
    assert disk.pending == {}
    assert disk.stores[p].checkpoint == 42
    disk.cache.drop_partition(p)
    assert disk.get("t1") == value
    assert [c.thread_id for c in disk.active([p])] == ["t1"]
    ended = cp.end_run(value, run_id="r1", open_after=[], now=NOW)
    disk.written(ended)
    disk.durable(ended, cp.to_bytes(ended), p, 43)
    assert disk.active([p]) == []
    disk.close()


def test_the_offset_stays_before_another_writers_records(tmp_path: Path) -> None:
    disk = owning(tmp_path, *range(PARTITIONS))
    p = partition_for("t1", PARTITIONS)
    disk.stores[p].write((), 10)
    value = began("t1", "r1")
    disk.written(value)
    disk.durable(value, cp.to_bytes(value), p, 14)  # 10..13: another worker's agents'
    assert disk.stores[p].checkpoint == 10
    disk.cache.drop_partition(p)
    assert disk.get("t1") == value  # the value is stored all the same
    disk.close()


def test_a_partition_read_again_keeps_the_threads_written_here_meanwhile(
        tmp_path: Path) -> None:
    p = partition_for("t1", PARTITIONS)
    mine, theirs = [t for t in (f"t{i}" for i in range(2, 200))
                    if partition_for(t, PARTITIONS) == p][:2]
    disk = owning(tmp_path, p)
    disk.rereading[p] = {b"t1"}  # in flight when the read began
    disk.written(began(mine, "r-new"))  # written during the read
    read = [Rec(key.encode(), cp.to_bytes(began(key, "r-old"))) for key in ("t1", mine, theirs)]
    assert [key for key, _, _ in disk._unless_written_here(p, read)] == [theirs.encode()]
    disk.close()


def test_a_newer_write_is_not_hidden_by_an_older_acknowledgement(tmp_path: Path) -> None:
    disk = owning(tmp_path, *range(PARTITIONS))
    p = partition_for("t1", PARTITIONS)
    first, second = began("t1", "r1"), began("t1", "r2")
    disk.written(first)
    disk.written(second)
    disk.durable(first, cp.to_bytes(first), p, 5)
    assert disk.get("t1") is second  # still in flight: memory wins
    disk.close()


def test_a_partition_handed_back_is_closed_and_forgotten(tmp_path: Path) -> None:
    p = partition_for("t1", PARTITIONS)
    disk = owning(tmp_path, p)
    value = began("t1", "r1")
    disk.written(value)
    disk.release([p])
    assert disk.get("t1") is None
    assert disk.stores == {}
    disk.durable(value, cp.to_bytes(value), p, 9)  # acknowledged after: the next owner's
    disk.close()


class Rec:
    def __init__(self, key: bytes | None, value: bytes | None) -> None:
        self.key, self.value = key, value
        self.topic, self.partition, self.offset = "p.checkpoints", 0, 0


def test_checkpoint_records_become_store_changes_marked_when_a_run_is_active() -> None:
    active, idle = cp.to_bytes(began("a", "r")), cp.to_bytes(cp.fresh("b"))
    records = [Rec(b"a", active), Rec(b"b", idle), Rec(b"c", None), Rec(None, b"{}"),
               Rec(b"d", b"garbage")]
    assert changes(0, records) == [(b"a", active, b"active"), (b"b", idle, None),
                                   (b"c", None, None)]
    assert active_raw(b"[]") is None


def test_a_store_that_cannot_be_written_fails_readiness_until_it_is_written_again(
        small_disk: Path, fill: Callable[[Path], Path]) -> None:
    """RocksDB stays read-only after a failed write until it is reopened: the store is
    reopened on each later write, and ``failing`` (readiness) names it meanwhile."""
    disk = owning(small_disk, *range(PARTITIONS))
    p = partition_for("t1", PARTITIONS)
    disk.stores[p].write((), 10)
    filler = fill(small_disk)
    offset = 10
    for n in range(200):  # until a write fails
        value = cp.begin_run(began("t1", "r1"), run_id=f"r{n}", request_id=f"q{n}",
                             agent="scripted", worker="w" * 2000, still_open=[], now=NOW)
        disk.written(value)
        disk.durable(value, cp.to_bytes(value), p, offset)
        offset += 1
        if disk.failing():
            break
    assert list(disk.failing()) == [f"checkpoint-store-{p}"]
    filler.unlink()
    last = began("t1", "r-last")
    disk.written(last)
    disk.durable(last, cp.to_bytes(last), p, offset)
    assert disk.failing() == {}
    assert disk.stores[p].get(b"t1") == cp.to_bytes(last)
    disk.close()
