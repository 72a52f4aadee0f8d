"""A store whose files vanish or are replaced under its running owner is lost: never
written again, never recreated empty at its path (which then claimed to be up to date),
and listed as damaged by ``agui-relay state`` until its next open rebuilds it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rocksdict import AccessType, Options, Rdict

from services.state.disk import PartitionStore, StoreError, StoreUnusableError, peek

pytestmark = pytest.mark.unit

BIG = b'{"filler":"' + b"x" * 300_000 + b'"}'
"""A value big enough that a few of them need a new write-ahead log file (RocksDB keeps
writing into its open log after the directory is gone, until it needs another)."""


def store_at(tmp_path: Path) -> tuple[PartitionStore, Path]:
    path = tmp_path / "state" / "gatekeeper-threads" / "agui.threads" / "p0"
    store = PartitionStore.open(path, 0)
    store.write([(b"old", b"value", None)], 1, "topic-id")
    return store, path


def fail_writes(store: PartitionStore) -> int:
    """Write big values until a write fails; the next offset."""
    for offset in range(2, 102):
        try:
            store.write([(f"k{offset}".encode(), BIG, None)], offset)
        except StoreError:
            return offset + 1
    pytest.fail("no write failed")


def test_a_vanished_store_is_not_reopened_empty_and_up_to_date(tmp_path: Path) -> None:
    store, path = store_at(tmp_path)
    shutil.rmtree(tmp_path / "state")
    offset = fail_writes(store)
    with pytest.raises(StoreError):  # a reopen never creates a store where one was open
        store.reopen()
    with pytest.raises(StoreError):
        store.write([(b"new", b"v", None)], offset + 1)
    assert store.get(b"old") == b"value", "what the open files hold is still read"
    assert peek(path, 0).offset is None
    assert "damaged" in (peek(path, 0).error or ""), "agui-relay state lists it as damaged"
    store.close()


def test_a_lost_store_is_rebuilt_at_its_next_open(tmp_path: Path) -> None:
    store, path = store_at(tmp_path)
    shutil.rmtree(tmp_path / "state")
    fail_writes(store)
    store.close()
    with pytest.raises(StoreUnusableError, match="damaged"):  # StateDir wipes and rebuilds
        PartitionStore.open(path, 0)
    fresh = PartitionStore.open_fresh(path, 0)
    assert fresh.checkpoint is None
    assert peek(path, 0).error is None
    fresh.close()


def test_a_store_replaced_by_another_database_is_never_written(tmp_path: Path) -> None:
    store, path = store_at(tmp_path)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    other = Rdict(str(tmp_path / "other"), options)  # someone else's database...
    other[b"theirs"] = b"1"
    other.close()
    shutil.rmtree(path)
    (tmp_path / "other").rename(path)  # ...moved to the path
    with pytest.raises(StoreError):
        store.write([(b"new", b"v", None)], 2)
    with pytest.raises(StoreError):
        store.reopen()
    reopened = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    assert reopened.get(b"\x00changelog-offset") is None, "the other database was written"
    reopened.close()
    assert not (path / "DAMAGED").exists(), "another database's directory is not ours to mark"
    store.close()
