"""The broker fault a restart scenario may excuse, recognised only where it explains everything.

The log line is Kafka 4.4's own, as a restarted broker wrote it in
``test_broker_restart`` (2026-12-01).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faults.checker import Report
from faults.hanging import explains, skipped_partitions
from services.kafka.partitioning import partition_for

pytestmark = pytest.mark.unit

LINE = (
    "[2026-12-01T15:42:43,942] INFO  [Transaction Marker Channel Manager 1]: Couldn't find "
    "leader endpoint for partitions HashSet(fbr7.dispatch.approval-1, fbr7.decisions-0, "
    "fbr7.threads-2, __consumer_offsets-0) while trying to send transaction markers for "
    "fbr7.gatekeeper.p0-3, these partitions are likely deleted already and hence can be "
    "skipped (kafka.coordinator.transaction.TransactionMarkerChannelManager)\n"
)


def thread_on(partition: int, partitions: int = 4) -> str:
    return next(t for n in range(1000) if partition_for(t := f"approval-{n}", partitions)
                == partition)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    path.write_text("[2026-12-01T15:42:44,388] INFO  [KafkaRaftServer nodeId=1] started\n" + LINE)
    return path


def test_the_skipped_partitions_are_read_from_the_broker_log(log: Path) -> None:
    assert skipped_partitions(log) == {
        "fbr7.dispatch.approval": {1}, "fbr7.decisions": {0}, "fbr7.threads": {2},
        "__consumer_offsets": {0},
    }
    assert skipped_partitions(log.parent / "missing.log") == {}


def test_records_not_seen_on_a_skipped_partition_are_explained(log: Path) -> None:
    report = Report()
    report.add("admission_without_dispatch",
               f"thread '{thread_on(1)}' request 'q': admitted, no dispatch")
    report.add("thread_left_running", f"thread '{thread_on(2)}' still running run 'r'")
    assert explains(report, skipped_partitions(log), "fbr7", 4)


@pytest.mark.parametrize(("kind", "partition", "prefix"), [
    ("run_dispatched_twice", 1, "fbr7"),  # something doubled: never the broker's skip
    ("thread_left_running", 3, "fbr7"),  # a partition the broker did not skip
    ("thread_left_running", 1, "other"),  # another deployment's partitions
])
def test_anything_else_is_not(log: Path, kind: str, partition: int, prefix: str) -> None:
    report = Report()
    report.add(kind, f"thread '{thread_on(partition)}' run 'r'")
    assert not explains(report, skipped_partitions(log), prefix, 4)
    assert not explains(Report(), skipped_partitions(log), "fbr7", 4)  # nothing to explain
