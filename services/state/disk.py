"""One partition's on-disk store: a RocksDB database, its changelog offset, its lock.

Keys live in three ranges of one database: ``d/<key>`` the values,
``m/<key>`` the *marked* keys with a small value of the owner's (listed at
open without scanning every value: the gatekeeper marks threads that are not
idle with what its gauges read of them), and
metadata keys: the format stamp (which store this is), the partition whose
state it holds, the changelog offset it reflects and the changelog topic's
id. The partition is stamped when the store is created and checked at every
open: a directory copied or moved into another partition's place (whose
checkpoint may well lie inside that partition's changelog too) was trusted,
and its threads' states answered for the other partition's (found by
probing: a run admitted past an open interrupt, threads of one tenant taken
by another). ``write`` puts values, marks and the offset in one
``WriteBatch``: after a crash the database holds all of a write or none of
it, so the offset never runs ahead of the values, nor behind them.

A lock file beside the directory (``<dir>.lock``, ``flock``) is held while
the store is open, so two processes (or two opens in one) never share a
partition's store; RocksDB's own ``LOCK`` guards the same inside the
directory. Files that do not open, or open as a database without this
store's stamp, raise ``StoreUnusableError`` for the caller to wipe and rebuild;
a write that fails (a full disk) raises ``StoreWriteError``.

An open store is the database it opened, never another one at its path: its
RocksDB identity is read at open, and a write or a reopen that finds it gone
(the directory deleted under the running owner, to free a full disk or by
mistake) or changed raises ``StoreLostError`` instead. A reopen never creates a
store: one created in place of a vanished store held nothing but the owner's
next write, with the current checkpoint, so it claimed to be up to date
(found by probing: runs admitted past open interrupts, threads answered as
unknown). A lost store leaves a ``DAMAGED`` note where it was, for
``agui-relay state`` to list and for the next open to rebuild it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    WriteBatch,
)

FORMAT = b"agui-relay state store 1"
FORMAT_KEY = b"\x00format"
OFFSET_KEY = b"\x00changelog-offset"
TOPIC_KEY = b"\x00changelog-topic-id"
PARTITION_KEY = b"\x00partition"
DATA = b"d/"
MARK = b"m/"
IDENTITY = "IDENTITY"
"""RocksDB's file holding the database's unique id (written when it is created)."""
DAMAGED = "DAMAGED"
"""The note a lost store's owner leaves at its path: why (``peek`` reads it; an open
rebuilds the store)."""
WRITE_BUFFER_BYTES = 2 << 20
"""RocksDB's memtable per store at most, two of them (its default, 64 MB, would dwarf the
cache)."""
MEMTABLES_BYTES = 32 << 20
"""What the memtables of every store open in a process hold together: each store's is this
shared among the stores open (``write_buffer_bytes``), so 64 partitions' stores cost what
8 do (each with 2 MB of its own, they held 127 MB where 8 held 14)."""
MIN_WRITE_BUFFER_BYTES = 64 << 10
"""A store's memtable at least, however many stores are open (smaller ones flush too
often to keep up with a restore)."""
BLOCK_CACHE = Cache(8 << 20)
"""One RocksDB block cache for every store of the process (the decoded cache is ours)."""

UNWRITABLE = ("No space left on device", "Read-only file system", "Permission denied")
"""What RocksDB says when a store cannot be opened because of the disk it is on: the
store is not wiped for it (it may be whole, and a rebuild could not be written either)."""

Change = tuple[bytes, bytes | None, bytes | None]
"""A key, its new value (None: deleted) and its mark (None: not marked): a small value
the owner lists at open without reading every value (a deleted key is never marked)."""


class StoreError(Exception):
    """Something about a partition's store; the subclasses say what the caller does."""


class StoreUnusableError(StoreError):
    """The files cannot be opened or read as this store: wipe them and rebuild."""


class StoreLockedError(StoreError):
    """Another process (or another open in this one) holds the partition's store."""


class StoreWriteError(StoreError):
    """A write failed (e.g. no space left on device); nothing of it was kept."""


class StoreLostError(StoreUnusableError):
    """The open store's files vanished or were replaced under it: never written again;
    its owner rebuilds it from the changelog (a restart does)."""


def write_buffer_bytes(stores: int) -> int:
    """Each store's memtable size while ``stores`` are open in the process (two memtables
    each, ``MEMTABLES_BYTES`` among them all)."""
    shared = MEMTABLES_BYTES // (2 * max(stores, 1))
    return max(MIN_WRITE_BUFFER_BYTES, min(WRITE_BUFFER_BYTES, shared))


def _options(write_buffer: int, create: bool = True) -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(create)
    opts.set_paranoid_checks(True)
    opts.set_write_buffer_size(write_buffer)
    opts.set_max_write_buffer_number(2)
    opts.set_keep_log_file_num(2)
    opts.set_max_log_file_size(1 << 20)
    opts.set_max_open_files(64)
    table = BlockBasedOptions()
    table.set_block_cache(BLOCK_CACHE)
    table.set_bloom_filter(10, False)
    opts.set_block_based_table_factory(table)
    return opts


def lock(path: Path) -> IO[bytes]:
    """Hold ``<path>.lock`` (raises ``StoreLockedError`` when someone else does)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(f"{path}.lock", "ab")  # noqa: SIM115 - held while the store is open
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        handle.close()
        raise StoreLockedError(f"{path} is open in another process") from exc
    return handle


def unlock(handle: IO[bytes]) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    handle.close()


def wipe(path: Path) -> None:
    """Delete a store's files (the caller holds its lock)."""
    if path.is_symlink():  # a link (even a loop or a dangling one) where the directory should be
        path.unlink()
        return
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():  # a file where the directory should be
        path.unlink()


class PartitionStore:
    """An open store; ``open`` it, ``close`` it (the lock goes with it).

    Its memtable is sized for the stores open in the process when it opens, and sized
    again at its next write when that number has changed since (a restore opens every
    partition's store before it writes any)."""

    opened = 0
    """Stores open in this process now (stores open in worker threads: ``_counting``)."""
    _counting = threading.Lock()

    def __init__(self, path: Path, partition: int, db: Rdict, held: IO[bytes],
                 write_buffer: int) -> None:
        self.path = path
        self.partition = partition
        self._db = db
        self._held = held
        self._write_buffer = write_buffer
        self._counted = True
        self._identity = identity(path)
        """The database's id at open: the files a write or a reopen must still find."""
        self.lost: str | None = None
        """Why the store's files are no longer this store's (None: they are)."""
        with PartitionStore._counting:
            PartitionStore.opened += 1

    @classmethod
    def open(cls, path: Path, partition: int) -> PartitionStore:
        """Lock and open ``partition``'s store at ``path``, creating it when there is none.

        Raises ``StoreLockedError`` when it is held elsewhere, ``StoreUnusableError``
        (the lock released) when the files are not this store's, or another partition's.
        """
        held = lock(path)
        try:
            size = write_buffer_bytes(cls.opened + 1)
            return cls(path, partition, _open(path, partition, size), held, size)
        except BaseException:
            unlock(held)
            raise

    @classmethod
    def open_fresh(cls, path: Path, partition: int) -> PartitionStore:
        """Lock, wipe whatever is at ``path``, and open an empty store there."""
        held = lock(path)
        try:
            wipe(path)
            size = write_buffer_bytes(cls.opened + 1)
            return cls(path, partition, _open(path, partition, size), held, size)
        except BaseException:
            unlock(held)
            raise

    def reopen_fresh(self) -> None:
        """Wipe this store's files and start empty, keeping the lock."""
        self._db.close()
        wipe(self.path)
        self._write_buffer = write_buffer_bytes(PartitionStore.opened)
        self._db = _open(self.path, self.partition, self._write_buffer)
        self._identity = identity(self.path)
        self.lost = None

    def reopen(self) -> None:
        """Close and open the database again, keeping the lock (RocksDB stays read-only
        after a failed write, e.g. a full disk, until it is reopened).

        Never creates one: ``StoreLostError`` when the files are gone or another
        database's (the open one is kept for reading what it still can)."""
        self.check()
        with contextlib.suppress(Exception):
            self._db.close()
        try:
            self._write_buffer = write_buffer_bytes(PartitionStore.opened)
            self._db = _open(self.path, self.partition, self._write_buffer, create=False)
        except (StoreUnusableError, StoreWriteError) as exc:
            # Still unwritable (the disk is still full): keep reading what the store holds,
            # read-only, so lookups never meet a closed database; the next write reopens again.
            try:
                self._db = Rdict(str(self.path), Options(raw_mode=True),
                                 access_type=AccessType.read_only(error_if_log_file_exist=False))
            except Exception as inner:
                raise StoreUnusableError(f"{self.path} reopens neither writable ({exc}) nor "
                                         f"read-only ({inner})") from inner
            raise StoreWriteError(f"reopening {self.path} failed: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._db.close()
        unlock(self._held)
        if self._counted:
            self._counted = False
            with PartitionStore._counting:
                PartitionStore.opened -= 1

    # ---- reading -----------------------------------------------------------------

    @property
    def checkpoint(self) -> int | None:
        """The changelog offset the store reflects (the next one to read), if any."""
        raw = self._read(OFFSET_KEY)
        return int(raw) if raw is not None else None

    @property
    def topic_id(self) -> str | None:
        """The id of the changelog topic the checkpoint counts offsets of, once a restore
        has written it (a topic recreated under the same name has another)."""
        raw = self._read(TOPIC_KEY)
        return raw.decode() if raw is not None else None

    def get(self, key: bytes) -> bytes | None:
        return self._read(DATA + key)

    def data_keys(self) -> Iterator[bytes]:
        """Every key holding a value (a scan: for tools and tests, not the hot path)."""
        return self._range(DATA)

    def marked(self) -> Iterator[tuple[bytes, bytes]]:
        """The keys written marked, with their marks."""
        try:
            for key, mark in self._db.items(from_key=MARK):
                if not isinstance(key, bytes) or not key.startswith(MARK):
                    return
                yield key[len(MARK):], mark
        except Exception as exc:
            raise StoreUnusableError(f"reading {self.path} failed: {exc}") from exc

    def disk_bytes(self) -> int:
        """What the store's files take on disk now."""
        total = 0
        for root, _, files in os.walk(self.path):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(root, name)).st_size
        return total

    # ---- writing ---------------------------------------------------------------------

    def write(self, changes: Iterable[Change], checkpoint: int | None,
              topic_id: str | None = None) -> None:
        """Apply ``changes`` and, when given, move the checkpoint and record the changelog
        topic's id: all in one write batch."""
        batch = WriteBatch(raw_mode=True)
        for key, value, mark in changes:
            if value is None:
                batch.delete(DATA + key)
            else:
                batch.put(DATA + key, value)
            if mark is not None and value is not None:
                batch.put(MARK + key, mark)
            else:
                batch.delete(MARK + key)
        if checkpoint is not None:
            batch.put(OFFSET_KEY, str(checkpoint).encode())
        if topic_id is not None:
            batch.put(TOPIC_KEY, topic_id.encode())
        self.check()
        try:
            self._resize()
            self._db.write(batch)
        except Exception as exc:
            raise StoreWriteError(f"writing {self.path} failed: {exc}") from exc

    # ---- internals -------------------------------------------------------------------

    def check(self) -> None:
        """Raise ``StoreLostError`` unless the files at the path are still the database
        opened (a 37-byte read per write), leaving the note where it was (again at each
        call until it is there: a full disk may refuse it)."""
        if self.lost is None:
            now = identity(self.path)
            if now == self._identity and self._identity is not None:
                return
            self.lost = ("its files are gone (deleted under the running owner)" if now is None
                         else "its files were replaced by another database's")
        if damaged(self.path) is None:
            _note_damaged(self.path, self.lost)
        raise StoreLostError(f"{self.path}: {self.lost}")

    def _resize(self) -> None:
        """Size the memtable for the stores open now, if that changed since it was sized."""
        size = write_buffer_bytes(PartitionStore.opened)
        if size != self._write_buffer:
            self._db.set_options({"write_buffer_size": str(size)})
            self._write_buffer = size

    def _read(self, key: bytes) -> bytes | None:
        try:
            value = self._db.get(key)
        except Exception as exc:
            raise StoreUnusableError(f"reading {self.path} failed: {exc}") from exc
        return value if isinstance(value, bytes) else None

    def _range(self, prefix: bytes) -> Iterator[bytes]:
        try:
            for key in self._db.keys(from_key=prefix):
                if not isinstance(key, bytes) or not key.startswith(prefix):
                    return
                yield key[len(prefix):]
        except Exception as exc:
            raise StoreUnusableError(f"reading {self.path} failed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Peek:
    """What a store directory holds, read without taking it from its owner."""

    offset: int | None
    disk_bytes: int
    held: bool
    """Open in some process now (its lock is held)."""
    error: str | None = None


def peek(path: Path, partition: int) -> Peek:
    """Read ``partition``'s store's checkpoint read-only (its owner may have it open
    meanwhile)."""
    held = _held(path)
    size = 0
    for f in path.rglob("*"):
        with contextlib.suppress(OSError):
            if f.is_file():
                size += f.stat().st_size
    note = damaged(path)
    if note is not None:
        return Peek(None, size, held, f"damaged, rebuilt at its next open: {note}")
    try:
        db = Rdict(str(path), Options(raw_mode=True),
                   access_type=AccessType.read_only(error_if_log_file_exist=False))
    except Exception as exc:
        return Peek(None, size, held, f"does not open: {exc}")
    try:
        raw = db.get(OFFSET_KEY)
        offset = int(raw) if isinstance(raw, bytes) and raw.isdigit() else None
        stamp = db.get(FORMAT_KEY)
        wrong = _wrong_partition(db.get(PARTITION_KEY), partition)
    finally:
        db.close()
    return Peek(offset, size, held, f"not this store: {stamp!r}" if stamp != FORMAT else wrong)


def _held(path: Path) -> bool:
    """Whether a process holds ``path``'s lock now, read without writing anything (a
    read-only state directory, or one being inspected, stays as it is)."""
    try:
        fd = os.open(f"{path}.lock", os.O_RDONLY)
    except OSError:
        return False  # no lock file: no owner
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing releases the shared lock taken above
    return False


def _wrong_partition(stamp: object, partition: int) -> str | None:
    """Why a store stamped ``stamp`` is not ``partition``'s (None: it is)."""
    if stamp == str(partition).encode():
        return None
    if stamp is None:
        return "the store does not say which partition it holds (written before stores did)"
    held = stamp.decode(errors="replace") if isinstance(stamp, bytes) else repr(stamp)
    return f"the store holds partition {held}'s state, not partition {partition}'s"


def reported_lost(log: logging.Logger, what: str, partition: int, exc: StoreLostError,
                  changelog: str) -> str:
    """Log once that ``what`` of ``partition`` is lost (its owner keeps what it could not
    write in memory and never writes it again); the reason ``/readyz`` gives."""
    log.error("%s of partition %d is lost, keeping what it cannot take in memory and never "
              "writing it again (not ready): %s; restart the service to rebuild it from %s",
              what, partition, exc, changelog)
    return f"{exc}; restart the service to rebuild it from {changelog}"


def identity(path: Path) -> bytes | None:
    """The id of the database at ``path`` (None: there is none)."""
    try:
        return (path / IDENTITY).read_bytes()
    except OSError:
        return None


def damaged(path: Path) -> str | None:
    """Why the owner of the store at ``path`` found it lost (None: it did not)."""
    try:
        return (path / DAMAGED).read_text(errors="replace").strip()
    except OSError:
        return None


def _note_damaged(path: Path, why: str) -> None:
    """Leave ``DAMAGED`` where a lost store was (best effort: the disk may be full), unless
    another database is there now (not ours to touch)."""
    if identity(path) is not None:
        return
    with contextlib.suppress(OSError):
        path.mkdir(parents=True, exist_ok=True)
        (path / DAMAGED).write_text(f"{why}; the owner kept running without it\n")


def _open(path: Path, partition: int, write_buffer: int, create: bool = True) -> Rdict:
    """The database at ``path``, stamped as ``partition``'s store; ``StoreUnusableError``
    when it is not (or, unless ``create``, when there is none)."""
    note = damaged(path)
    if note is not None:
        raise StoreUnusableError(f"its last owner found it damaged: {note}")
    existed = path.exists() and (not path.is_dir() or any(path.iterdir()))
    try:
        db = Rdict(str(path), _options(write_buffer, create))
    except Exception as exc:
        if any(said in str(exc) for said in UNWRITABLE):  # the disk's state, not the files'
            raise StoreWriteError(f"{path} cannot be opened for writing, kept as it is "
                                  f"({exc})") from exc
        raise StoreUnusableError(f"the files do not open as a store ({exc})") from exc
    try:
        stamp = db.get(FORMAT_KEY)
        offset = db.get(OFFSET_KEY)
        if stamp is None and not existed:
            db[FORMAT_KEY] = FORMAT
            db[PARTITION_KEY] = str(partition).encode()
            return db
        if stamp != FORMAT:
            raise StoreUnusableError("the directory holds something that is not this store "
                                f"(format {stamp!r})")
        wrong = _wrong_partition(db.get(PARTITION_KEY), partition)
        if wrong is not None:
            raise StoreUnusableError(wrong)
        if offset is not None and not (isinstance(offset, bytes) and offset.isdigit()):
            raise StoreUnusableError(f"the changelog offset reads {offset!r}")
    except StoreUnusableError:
        db.close()
        raise
    except Exception as exc:
        db.close()
        raise StoreUnusableError(f"the store does not read back ({exc})") from exc
    return db
