"""The state stores' memory against the partition count: one budget for every store.

README (State on disk): the memtables of every store a process holds share one budget
(``MEMTABLES_BYTES``), not 2 x 2 MB each. A consumer-service instance keeps one store per
``threads`` partition (all of them): with its own memtables each, the same 112 MB of
states cost 14 MB of RSS in 8 stores and 127 MB in 64 (a 64-partition deployment's
consumer held ~440 MB at 250,000 threads). Here, without a broker: the same bytes written
through ``PartitionStore.write`` in batches of 100, once over 8 stores and once over 64;
the resident memory each costs is read from ``/proc``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.state.disk import (
    MEMTABLES_BYTES,
    MIN_WRITE_BUFFER_BYTES,
    WRITE_BUFFER_BYTES,
    PartitionStore,
    write_buffer_bytes,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
TOTAL_STATES = 160_000
VALUE_BYTES = 700

SCRIPT = """
import sys
from pathlib import Path
from services.state.disk import PartitionStore
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) * 1024
root, parts, total, size = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
stores = [PartitionStore.open(root / f"p{p}", p) for p in range(parts)]
before = rss()
value = b"x" * size
per = total // parts
for p, store in enumerate(stores):
    for start in range(0, per, 100):
        store.write([(b"d/t-%d-%d" % (p, i), value, None) for i in range(start, start + 100)],
                    start + 100)
print(rss() - before)
"""


def _growth(tmp: Path, partitions: int) -> int:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp / f"s{partitions}"),
                           str(partitions), str(TOTAL_STATES), str(VALUE_BYTES)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
    return int(done.stdout.strip())


def test_store_memory_does_not_grow_with_the_partition_count(tmp_path: Path) -> None:
    eight = _growth(tmp_path, 8)
    sixty_four = _growth(tmp_path, 64)
    mb = 1 << 20
    assert sixty_four <= 2 * eight + 16 * mb, (
        f"{TOTAL_STATES * VALUE_BYTES / mb:.0f} MB of states cost {eight / mb:.0f} MB of RSS "
        f"in 8 stores and {sixty_four / mb:.0f} MB in 64: each store's memtables are budgeted "
        f"alone, not shared within one budget (services/state/disk.py MEMTABLES_BYTES)")


@pytest.mark.parametrize("stores", [1, 8, 16, 64, 256, 10_000])
def test_the_stores_memtables_share_one_budget(stores: int) -> None:
    size = write_buffer_bytes(stores)
    assert MIN_WRITE_BUFFER_BYTES <= size <= WRITE_BUFFER_BYTES
    assert 2 * size * stores <= MEMTABLES_BYTES or size == MIN_WRITE_BUFFER_BYTES


def test_a_store_is_sized_again_at_its_next_write_once_more_stores_are_open(
        tmp_path: Path) -> None:
    before = PartitionStore.opened
    first = PartitionStore.open(tmp_path / "p0", 0)
    alone = first._write_buffer
    others = [PartitionStore.open(tmp_path / f"p{p}", p) for p in range(1, 64)]
    try:
        first.write([(b"t", b"{}", None)], 1)
        shared = first._write_buffer
        open_now = PartitionStore.opened - before
    finally:
        for store in [first, *others]:
            store.close()
    assert (alone, shared, open_now) == (write_buffer_bytes(before + 1),
                                         write_buffer_bytes(before + 64), 64)
    assert PartitionStore.opened == before
