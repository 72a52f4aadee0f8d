"""Recognise a Kafka broker fault the relay cannot prevent: transaction markers skipped on restart.

When a single broker restarts with a transaction in PrepareCommit, its
transaction coordinator completes that transaction before the broker's own
partitions have a leader endpoint in its metadata cache, and Kafka (4.4,
``TransactionMarkerChannelManager``) then *skips* the markers of those
partitions as "likely deleted already" and logs so at INFO. Each such
partition keeps the transaction open ("hanging"): its last stable offset
stops before the transaction's records, so ``read_committed`` readers see
nothing after it until the same producer writes to the partition again,
which completes it. Seen in about one broker-restart scenario in four here;
the other records of the transaction, on partitions that got their marker,
are visible. Nothing is lost or doubled, but the checker, reading before the
partition heals, finds admissions without their dispatch and threads left
running.

``explains`` tells whether every violation is of that kind (something not
seen, never something doubled) on a thread whose partition the broker
logged as skipped; only then does a scenario report the broker's fault
instead of failing.
"""

from __future__ import annotations

import re
from pathlib import Path

from faults.checker import Report
from services.kafka.partitioning import partition_for

SKIPPED = re.compile(
    r"Couldn't find leader endpoint for partitions (?:HashSet|Set)\((?P<partitions>[^)]*)\)"
    r" while trying to send transaction markers for (?P<txn>\S+), these partitions are likely"
    r" deleted already and hence can be skipped"
)
UNSEEN = frozenset({
    "admission_without_dispatch", "thread_left_running", "thread_left_queued",
    "request_undecided", "run_never_started", "run_not_terminated", "run_not_opened",
})
"""Violations a record hidden behind a hanging transaction can cause: nothing doubled."""
THREAD = re.compile(r"thread '([^']+)'")


def skipped_partitions(broker_log: Path) -> dict[str, set[int]]:
    """Topic → partitions whose transaction markers the broker logged as skipped."""
    skipped: dict[str, set[int]] = {}
    text = broker_log.read_text(errors="replace") if broker_log.exists() else ""
    for match in SKIPPED.finditer(text):
        for name in match["partitions"].split(","):
            topic, _, number = name.strip().rpartition("-")
            if topic and number.isdigit():
                skipped.setdefault(topic, set()).add(int(number))
    return skipped


def explains(report: Report, skipped: dict[str, set[int]], prefix: str,
             partitions: int) -> bool:
    """True when the skipped markers account for every violation in ``report``."""
    ours = set().union(*(numbers for topic, numbers in skipped.items()
                         if topic.startswith(f"{prefix}.")), set())
    if report.ok or not ours:
        return False
    for violation in report.violations:
        thread = THREAD.search(violation.detail)
        if violation.kind not in UNSEEN or thread is None:
            return False
        if partition_for(thread.group(1), partitions) not in ours:
            return False
    return True
