"""``PartitionStore`` and ``StateDir`` on real RocksDB files: atomic writes, the lock,
bad files rebuilt, stores handed back deleted after the grace period."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from services.state.dirs import StateDir
from services.state.disk import (
    PARTITION_KEY,
    PartitionStore,
    StoreLockedError,
    StoreUnusableError,
    StoreWriteError,
    peek,
)

pytestmark = pytest.mark.unit


def test_values_marks_and_checkpoint_read_back_after_reopening(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    store = PartitionStore.open(path, 0)
    assert store.checkpoint is None
    store.write([(b"t1", b"one", b"1"), (b"t2", b"two", None)], 7)
    store.write([(b"t2", b"TWO", b"2"), (b"t1", None, b"x")], None)
    store.close()
    store = PartitionStore.open(path, 0)
    try:
        assert store.checkpoint == 7  # a write without an offset keeps the last one
        assert store.get(b"t1") is None
        assert store.get(b"t2") == b"TWO"
        assert list(store.marked()) == [(b"t2", b"2")]  # a deleted key is never marked
        assert list(store.data_keys()) == [b"t2"]
        assert store.disk_bytes() > 0
    finally:
        store.close()


def test_two_opens_of_one_partition_never_share_it(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p3", 3)
    try:
        with pytest.raises(StoreLockedError):
            PartitionStore.open(tmp_path / "p3", 3)
        with pytest.raises(StoreLockedError):
            PartitionStore.open_fresh(tmp_path / "p3", 3)
    finally:
        store.close()
    PartitionStore.open(tmp_path / "p3", 3).close()  # released with the close


def test_a_lock_held_by_another_process_refuses_the_open(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p0", 0)
    store.close()
    pid = os.fork()
    if pid == 0:  # the child holds the store until the parent has tried
        held = PartitionStore.open(tmp_path / "p0", 0)
        (tmp_path / "held").touch()
        while not (tmp_path / "tried").exists():
            pass
        held.close()
        os._exit(0)
    try:
        while not (tmp_path / "held").exists():
            pass
        with pytest.raises(StoreLockedError):
            PartitionStore.open(tmp_path / "p0", 0)
    finally:
        (tmp_path / "tried").touch()
        os.waitpid(pid, 0)
    PartitionStore.open(tmp_path / "p0", 0).close()


def _filled(path: Path) -> None:
    store = PartitionStore.open(path, 0)
    store.write([(f"t{i}".encode(), b"x" * 100, None) for i in range(2000)], 2000)
    store.close()


def test_garbage_files_are_unusable_and_a_fresh_open_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    _filled(path)
    for child in path.iterdir():
        child.write_bytes(os.urandom(64))
    with pytest.raises(StoreUnusableError):
        PartitionStore.open(path, 0)
    store = PartitionStore.open_fresh(path, 0)
    try:
        assert store.checkpoint is None
        assert list(store.data_keys()) == []
    finally:
        store.close()


def test_a_foreign_database_is_unusable(tmp_path: Path) -> None:
    from rocksdict import Rdict
    db = Rdict(str(tmp_path / "p0"))
    db["something"] = "else"
    db.close()
    with pytest.raises(StoreUnusableError, match="not this store"):
        PartitionStore.open(tmp_path / "p0", 0)


def test_a_file_where_the_directory_should_be_is_unusable(tmp_path: Path) -> None:
    (tmp_path / "p0").write_bytes(b"not a directory")
    with pytest.raises(StoreUnusableError):
        PartitionStore.open(tmp_path / "p0", 0)
    PartitionStore.open_fresh(tmp_path / "p0", 0).close()


def test_state_dir_reuses_a_good_store_and_says_why_it_wiped_another(tmp_path: Path) -> None:
    states = StateDir(tmp_path, "threads", grace_s=60)
    store, why = states.open(0)
    assert why == "no store on this machine"
    store.write([(b"t", b"v", None)], 5)
    states.release(0, store)
    store, why = states.open(0)
    assert why is None
    assert store.checkpoint == 5
    states.release(0, store)
    (states.path(0) / "CURRENT").write_bytes(b"garbage")
    store, why = states.open(0)
    assert why is not None
    assert "do not open" in why
    assert store.checkpoint is None
    store.close()


def test_state_dir_deletes_a_store_handed_back_only_after_the_grace(tmp_path: Path) -> None:
    now = [100.0]
    states = StateDir(tmp_path, "threads", grace_s=30, clock=lambda: now[0])
    store, _ = states.open(1)
    states.release(1, store)
    now[0] += 29
    assert states.sweep() == []
    assert states.path(1).exists()
    now[0] += 2
    assert states.sweep() == [1]
    assert not states.path(1).exists()


def test_a_store_opened_again_within_the_grace_is_kept(tmp_path: Path) -> None:
    now = [0.0]
    states = StateDir(tmp_path, "threads", grace_s=30, clock=lambda: now[0])
    store, _ = states.open(1)
    states.release(1, store)
    store, _ = states.open(1)
    now[0] += 60
    assert states.sweep() == []
    store.close()


def test_a_store_another_process_holds_is_not_deleted(tmp_path: Path) -> None:
    now = [0.0]
    mine = StateDir(tmp_path, "threads", grace_s=1, clock=lambda: now[0])
    store, _ = mine.open(2)
    mine.release(2, store)
    theirs = PartitionStore.open(mine.path(2), 2)  # as another process on this machine would
    now[0] += 5
    try:
        assert mine.sweep() == []
        assert mine.path(2).exists()
    finally:
        theirs.close()


def test_stores_left_by_an_earlier_run_are_deleted_after_the_grace_unless_opened(
        tmp_path: Path) -> None:
    now = [0.0]
    first = StateDir(tmp_path, "threads", grace_s=10, clock=lambda: now[0])
    for p in (0, 1):
        store, _ = first.open(p)
        store.close()
    second = StateDir(tmp_path, "threads", grace_s=10, clock=lambda: now[0])
    second.start()
    kept, _ = second.open(0)
    now[0] += 11
    assert second.sweep() == [1]
    kept.close()


def test_a_failed_write_is_a_store_write_error_and_keeps_nothing(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p0", 0)
    store.write([(b"a", b"1", None)], 1)
    store.close()  # writing through a closed handle fails like a full disk does: raises
    with pytest.raises(StoreWriteError):
        store.write([(b"a", b"2", None)], 2)
    store = PartitionStore.open(tmp_path / "p0", 0)
    try:
        assert (store.get(b"a"), store.checkpoint) == (b"1", 1)
    finally:
        store.close()


def test_a_full_disk_fails_the_write_whole_and_keeps_the_last_checkpoint(small_disk: Path) -> None:
    store = PartitionStore.open(small_disk / "p0", 0)
    written = 0
    failure: StoreWriteError | None = None
    for i in range(10_000):
        try:
            store.write([(f"k{i}".encode(), os.urandom(2000), None)], i + 1)
        except StoreWriteError as exc:
            failure = exc
            break
        written = i + 1
    assert failure is not None
    assert "No space left" in str(failure)
    assert written > 0
    assert store.checkpoint == written  # the failed write kept nothing, not even its offset
    store.close()


def test_a_store_still_unwritable_when_reopened_is_read_on_and_written_once_there_is_room(
        small_disk: Path, fill: Callable[[Path], Path]) -> None:
    """A reopen on a full disk must not leave a closed database behind: every lookup
    would fail (the gatekeeper's routing loop, the consumer's thread reads)."""
    store = PartitionStore.open(small_disk / "p0", 0)
    store.write([(b"kept", b"value", None)], 1)
    filler = fill(small_disk)
    failed, written = None, 1
    for i in range(1000):
        try:
            store.write([(f"k{i}".encode(), os.urandom(2000), None)], 2 + i)
        except StoreWriteError as exc:
            failed = exc
            break
        written = 2 + i
    assert failed is not None
    with pytest.raises(StoreWriteError):
        store.reopen()
    assert store.get(b"kept") == b"value"
    assert store.checkpoint == written
    filler.unlink()
    store.reopen()
    store.write([(b"later", b"v2", None)], 7)
    assert (store.get(b"kept"), store.get(b"later"), store.checkpoint) == (b"value", b"v2", 7)
    store.close()


def test_a_store_that_cannot_open_for_want_of_space_is_kept_not_wiped(
        small_disk: Path, fill: Callable[[Path], Path]) -> None:
    """Restarted on a full disk, a whole store must not be taken for broken files: wiped,
    its rebuild could not be written either, and every restart would lose another."""
    states = StateDir(small_disk, "threads", grace_s=60)
    store, _ = states.open(0)
    store.write([(b"kept", b"value", None)], 41)
    store.close()
    filler = fill(small_disk)
    with pytest.raises(StoreWriteError, match="kept as it is"):
        states.open(0)
    filler.unlink()
    store, why = states.open(0)
    assert (why, store.checkpoint, store.get(b"kept")) == (None, 41, b"value")
    store.close()


@pytest.mark.parametrize("link", ["loop", "dangling"])
def test_a_broken_symlink_where_a_store_should_be_is_replaced_by_a_fresh_store(
        tmp_path: Path, link: str) -> None:
    """(A link to a directory is a store kept elsewhere, and is used as one.)"""
    states = StateDir(tmp_path / "state", "threads", grace_s=60)
    path = states.path(0)
    path.parent.mkdir(parents=True)
    path.symlink_to({"loop": path, "dangling": tmp_path / "nothing"}[link])
    store, why = states.open(0)
    assert why is not None
    assert path.is_dir()
    assert not path.is_symlink()
    store.write([(b"t", b"v", None)], 3)
    assert store.checkpoint == 3
    store.close()


def test_peek_writes_nothing_into_the_directory_it_inspects(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p0", 0)
    store.write([(b"t", b"v", None)], 9)
    assert peek(tmp_path / "p0", 0).held
    store.close()
    lock = tmp_path / "p0.lock"
    lock.unlink(missing_ok=True)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    seen = peek(tmp_path / "p0", 0)
    assert (seen.offset, seen.held) == (9, False)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


async def test_a_new_owner_waits_for_the_previous_one_to_close_the_store(tmp_path: Path) -> None:
    states = StateDir(tmp_path, "threads", grace_s=60)
    previous = PartitionStore.open(states.path(0), 0)

    async def hand_back() -> None:
        await asyncio.sleep(0.3)
        previous.close()

    closing = asyncio.create_task(hand_back())
    store, _ = await states.open_waiting(0, timeout_s=30)
    await closing
    store.close()


async def test_waiting_for_a_store_held_for_ever_gives_up(tmp_path: Path) -> None:
    states = StateDir(tmp_path, "threads", grace_s=60)
    held = PartitionStore.open(states.path(0), 0)
    try:
        with pytest.raises(StoreLockedError):
            await states.open_waiting(0, timeout_s=0.3)
    finally:
        held.close()


def test_a_store_moved_into_another_partitions_place_is_unusable_there(tmp_path: Path) -> None:
    """Its checkpoint may lie inside the other partition's changelog too: trusted, its
    threads' states answered for the other partition's (found by probing)."""
    store = PartitionStore.open(tmp_path / "p3", 3)
    store.write([(b"thread-of-p3", b"its state", b"interrupted")], 90, "topic-id-1")
    store.close()
    shutil.copytree(tmp_path / "p3", tmp_path / "p0")
    with pytest.raises(StoreUnusableError, match="holds partition 3's state, not partition 0's"):
        PartitionStore.open(tmp_path / "p0", 0)
    assert "partition 3's state" in str(peek(tmp_path / "p0", 0).error)
    PartitionStore.open(tmp_path / "p3", 3).close()  # in its own place it is still whole


def test_a_store_that_does_not_say_its_partition_is_unusable(tmp_path: Path) -> None:
    """Stores written before the stamp: no way to tell where they came from."""
    store = PartitionStore.open(tmp_path / "p0", 0)
    store.write([(b"t", b"v", None)], 5)
    store.close()
    db = Rdict(str(tmp_path / "p0"), Options(raw_mode=True))
    del db[PARTITION_KEY]
    db.close()
    with pytest.raises(StoreUnusableError, match="does not say which partition"):
        PartitionStore.open(tmp_path / "p0", 0)


def test_another_partitions_store_copied_into_place_is_rebuilt_on_open(tmp_path: Path) -> None:
    states = StateDir(tmp_path, "gatekeeper-threads/x.threads", grace_s=600)
    p3, _ = states.open(3)
    p3.write([(b"thread-of-p3", b"its state", b"interrupted")], 90, "topic-id-1")
    p3.close()
    shutil.copytree(states.path(3), states.path(0))
    p0, wiped = states.open(0)
    try:
        assert wiped is not None
        assert "partition 3's" in wiped
        assert p0.checkpoint is None
        assert p0.get(b"thread-of-p3") is None
    finally:
        p0.close()
