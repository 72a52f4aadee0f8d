"""A worker taking a partition over for one agent sees what another worker checkpointed there.

Every agent's checkpoints share the ``producer-checkpoints`` partitions, and
each agent's dispatch partitions are assigned apart. A worker that already
read a checkpoint partition for one agent, then takes the same partition
over for another agent from a worker that died, must read the partition
again: the dead worker's checkpoints there (a run it left open) were written
after the first read. It did not (``fault: kill at terminal`` failed when the
thread fell on such a partition); now it does, keeping its own newer writes,
in memory and with on-disk stores (``AGUI_STATE_DIR``). With stores, the
store's offset also stays below the other worker's records: a worker that
restarts on its stores and is then given the other agent's partition reads
them, rather than trusting an offset its own later writes moved past them.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.kafka.clients import AIOKafkaProducer
from services.kafka.partitioning import partition_for
from services.producer import checkpoint as cp
from services.producer.checkpoint_disk import CheckpointDisk
from services.producer.store import CheckpointStore
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


def on_disk(disks: list[CheckpointDisk], root: Path) -> CheckpointDisk:
    disk = CheckpointDisk(root, "unused", cache_mb=1, grace_s=60)
    disks.append(disk)
    return disk


def placed(partition: int, prefix: str) -> str:
    """A new thread id whose checkpoints land on ``partition``."""
    return next(t for t in (f"{prefix}-{uuid.uuid4().hex[:8]}" for _ in range(1000))
                if partition_for(t, 4) == partition)


def begun(thread_id: str, run_id: str, agent: str) -> cp.ThreadCheckpoint:
    return cp.begin_run(cp.fresh(thread_id), run_id=run_id, request_id=f"q-{run_id}",
                        agent=agent, worker="w", still_open=[], now=NOW)


@pytest.mark.parametrize("stores", ["memory", "disk"])
async def test_a_takeover_reads_the_partition_again_and_keeps_its_own_newer_writes(
        kafka: KafkaSettings, producers: list[AIOKafkaProducer], stores: str,
        disks: list[CheckpointDisk], tmp_path: Path) -> None:
    survivor = CheckpointStore(
        kafka, producers[0], clock=lambda: NOW,
        disk=on_disk(disks, tmp_path / "survivor") if stores == "disk" else None)
    dead = CheckpointStore(kafka, producers[1], clock=lambda: NOW)
    theirs = f"t-theirs-{uuid.uuid4().hex[:8]}"
    p = partition_for(theirs, kafka.partitions)
    ours = placed(p, "t-ours")

    await survivor.restore([p], "approval")  # before the other worker wrote anything
    await dead.restore([p], "scripted")
    await dead.update(theirs, lambda c: begun(theirs, "run-left-open", "scripted"))
    await survivor.update(ours, lambda c: begun(ours, "run-of-ours", "approval"))
    assert survivor.known(theirs) is None  # not read yet: the partition was read before

    await survivor.restore([p], "scripted")  # the takeover, for the other agent

    found = survivor.known(theirs)
    assert found is not None, "the dead worker's checkpoint was not read on takeover"
    assert found.active is not None
    assert found.active.run_id == "run-left-open"
    mine = survivor.known(ours)
    assert mine is not None
    assert mine.active is not None
    assert mine.active.run_id == "run-of-ours"
    assert theirs in {c.thread_id for c in survivor.threads([p])}


async def test_a_restarted_worker_given_the_other_agents_partition_reads_what_it_wrote_there(
        kafka: KafkaSettings, producers: list[AIOKafkaProducer], disks: list[CheckpointDisk],
        tmp_path: Path) -> None:
    root = tmp_path / "survivor"
    survivor = CheckpointStore(kafka, producers[0], clock=lambda: NOW,
                               disk=on_disk(disks, root))
    other = CheckpointStore(kafka, producers[1], clock=lambda: NOW)
    theirs = f"t-theirs-{uuid.uuid4().hex[:8]}"
    p = partition_for(theirs, kafka.partitions)
    ours = placed(p, "t-ours")

    await survivor.restore([p], "approval")
    await other.restore([p], "scripted")
    await other.update(theirs, lambda c: begun(theirs, "run-left-open", "scripted"))
    await survivor.update(ours, lambda c: begun(ours, "run-of-ours", "approval"))
    survivor.release([p], "approval")  # the worker stops; its store stays on disk
    assert survivor.disk is not None
    survivor.disk.close()

    restarted = CheckpointStore(kafka, producers[0], clock=lambda: NOW,
                                disk=on_disk(disks, root))
    await restarted.restore([p], "scripted")  # given the other agent's partition this time

    found = restarted.known(theirs)
    assert found is not None, "the store's offset had moved past the other worker's record"
    assert found.active is not None
    assert found.active.run_id == "run-left-open"
    assert {c.thread_id for c in restarted.threads([p])} == {theirs, ours}
