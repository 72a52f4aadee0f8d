"""A partition's committed thread states: in memory, or in its on-disk store behind a cache.

``ThreadStates`` is what ``Owned.states`` is, and what a ``Batch`` reads
its threads from. Without ``AGUI_STATE_DIR`` it is a dict, restored in full
from ``threads`` on every assignment, as before. With it, partition p's
states live in p's RocksDB store (``services.state``): a lookup goes to the
process's cache of decoded states (``AGUI_STATE_CACHE_MB``, shared by the
partitions) and then to the store; ``install`` writes what a committed
transaction wrote, with the offset after its ``threads`` records, in one
write batch, only after the commit returned (``commit`` step 6) — so the
store never reflects an uncommitted transaction, and a store behind its
changelog (killed between the commit and the write) catches up on the
next assignment. Threads that are not idle are *marked* in the store with
what the census and the expiry timer read of them (``census.slim``, a few
hundred bytes of JSON), so a restore hands them those, decoded from the
marks alone: never a scan, never a full state.

A write that fails (a full disk) loses nothing: Kafka holds the states,
they stay in memory (``pending``), every later install tries them again
after reopening the store, and ``Threads.failing`` makes ``/readyz`` fail
until one succeeds. A store whose files vanished or were replaced under it
(``StoreLostError``) is never written again, nor recreated: lookups read
what its open files still hold plus ``pending``, and ``/readyz`` fails until
a restart rebuilds it from ``threads``. A lookup the store answers with an
error stops the gatekeeper (``StoreUnreadableError``): a thread read as new
would be admitted past its interrupts. A stored state that no longer decodes reads as a new
thread, with a log line (the changelog is the truth; a full restore of a
store with unusable files rebuilds it).

``Threads`` is the instance's side: the state directory, the cache, the
last restore of each partition, and the metrics source.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from contracts import DecodeError, ThreadState, decode
from services.gatekeeper import wire
from services.gatekeeper.census import slim
from services.state import metrics
from services.state.cache import ByteLRU
from services.state.changelog import Restored
from services.state.dirs import StateDir
from services.state.disk import (
    Change,
    PartitionStore,
    StoreError,
    StoreLostError,
    reported_lost,
)

log = logging.getLogger(__name__)

STORE_NAME = "gatekeeper-threads"
DECODED_PER_BYTE = 9
"""A decoded ThreadState takes ~8.7 times its JSON in memory (measured with tracemalloc
on the golden thread state); entries are charged 9 times, plus ``ENTRY_BYTES``."""
ENTRY_BYTES = 200


def watched(state: ThreadState) -> bool:
    """Threads the census and the expiry timer follow: not idle, or holding interrupts."""
    return state.status != "idle" or bool(state.open_interrupts)


SLIM_FIELDS = ("schemaVersion", "threadId", "status", "agent", "runId", "parentRunId",
               "interruptedRunId", "runStartedAt", "updatedAt")
SLIM_INTERRUPT = ("id", "reason", "expiresAt")


def slim_raw(value: bytes) -> bytes | None:
    """The mark of a thread state record: ``census.slim`` of it as JSON, built from the
    record's JSON without validating it; None when the thread is idle. Raises
    ``ValueError`` when the value is not a JSON object."""
    doc = orjson.loads(value)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    opened = doc.get("openInterrupts") or []
    if doc.get("status") == "idle" and not opened:
        return None
    out = {k: doc[k] for k in SLIM_FIELDS if k in doc}
    out["openInterrupts"] = [
        {"runId": o.get("runId"), "interrupt": {k: o["interrupt"][k] for k in SLIM_INTERRUPT
                                                if k in o.get("interrupt", {})}}
        for o in opened if isinstance(o, dict)]
    return orjson.dumps(out)


class StoreUnreadableError(StoreError):
    """A partition's store answered a lookup with an error: no decision can be taken on
    what it holds (a thread read as new would be admitted past its interrupts), so the
    gatekeeper stops, logged once (``Processor.run``), and its restart rebuilds the store."""

    def __init__(self, partition: int, why: str) -> None:
        super().__init__(f"the state store of partition {partition} cannot be read: {why}")
        self.partition = partition


class ThreadStates(Mapping[str, ThreadState]):
    """Partition ``partition``'s committed thread states (see the module docstring)."""

    def __init__(self, partition: int, *, memory: dict[str, ThreadState] | None = None,
                 store: PartitionStore | None = None,
                 cache: ByteLRU[ThreadState] | None = None) -> None:
        self.partition = partition
        self.memory = memory if store is None else None
        if self.memory is None and store is None:
            self.memory = {}
        self.store = store
        self.cache: ByteLRU[ThreadState] = cache if cache is not None else ByteLRU(0)
        self.pending: dict[str, tuple[ThreadState, bytes]] = {}
        """States committed to Kafka that the store could not take yet (a full disk)."""
        self.failure: str | None = None
        self.lost = False
        """The store's files vanished or were replaced, or read back an error: until a
        restart rebuilds it, nothing is written to it and ``failure`` stays."""

    # ---- reading (the decision path) -------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        if self.memory is not None:
            return self.memory.get(key, default)
        found = self._lookup(key)
        return default if found is None else found

    def __getitem__(self, key: str) -> ThreadState:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __iter__(self) -> Iterator[str]:
        if self.memory is not None:
            return iter(list(self.memory))
        return self._keys()

    def __len__(self) -> int:
        """The number of threads (a scan of the store: for tools and tests)."""
        return sum(1 for _ in self)

    def watched(self) -> dict[str, ThreadState]:
        """The threads that are not idle, as the census reads them (``census.slim``; from
        the store's marks: no scan)."""
        return dict(self.watched_lazily())

    def watched_lazily(self) -> Iterator[tuple[str, ThreadState]]:
        """``watched`` one thread at a time: the marks are read from the store now (raw
        bytes, quick), each decoded as it is iterated (the slow part), so a caller can
        yield to the event loop between threads and let decisions through."""
        if self.memory is not None:
            return iter([(t, s) for t, s in self.memory.items() if watched(s)])
        assert self.store is not None
        marks = list(self.store.marked())
        return _decoded(marks, {t: slim(s) for t, (s, _) in self.pending.items()})

    # ---- writing (after a commit) ----------------------------------------------------------

    def install(self, states: Mapping[str, ThreadState], encoded: Mapping[str, bytes],
                changelog: int | None) -> None:
        """A committed transaction's states; ``changelog``: the offset after its ``threads``
        records on this partition, when known (None keeps the store's checkpoint)."""
        if self.memory is not None:
            self.memory.update(states)
            return
        for thread_id, state in states.items():
            raw = encoded.get(thread_id) or wire.state(state)
            self.pending[thread_id] = (state, raw)
            self.cache.put((self.partition, thread_id), state, _charge(raw))
        self.flush(changelog)

    def flush(self, changelog: int | None) -> None:
        """Write what is pending, with ``changelog`` as the new checkpoint."""
        assert self.store is not None
        if self.lost:  # never written again; the note of a vanished store, once it fits
            with contextlib.suppress(StoreError):
                self.store.check()
            return
        changes: list[Change] = [(t.encode(), raw, slim_raw(raw) if watched(s) else None)
                                 for t, (s, raw) in self.pending.items()]
        try:
            if self.failure is not None:
                self.store.reopen()
            self.store.write(changes, changelog)
        except StoreLostError as exc:
            self.failure = reported_lost(log, "state store", self.partition, exc,
                                         "the threads topic")
            self.lost = True
            return
        except StoreError as exc:
            if self.failure is None:
                log.error("state store of partition %d cannot be written, keeping %d states "
                          "in memory until it can (not ready): %s",
                          self.partition, len(self.pending), exc)
            self.failure = str(exc)
            return
        if self.failure is not None:
            log.warning("state store of partition %d written again (%d states kept meanwhile)",
                        self.partition, len(self.pending))
        self.pending.clear()
        self.failure = None

    def forget_cached(self) -> None:
        """The store was rewritten under the cache (a restore): drop what it holds of p."""
        self.cache.drop_partition(self.partition)

    # ---- internals -------------------------------------------------------------------------

    def _lookup(self, thread_id: str) -> ThreadState | None:
        held = self.pending.get(thread_id)
        if held is not None:
            return held[0]
        key = (self.partition, thread_id)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        assert self.store is not None
        try:
            raw = self.store.get(thread_id.encode())
        except StoreError as exc:
            if not self.lost:
                log.error("state store of partition %d cannot be read, the gatekeeper stops "
                          "(its next start rebuilds the store from the changelog): %s",
                          self.partition, exc)
            self.failure = f"cannot be read: {exc}"
            self.lost = True
            raise StoreUnreadableError(self.partition, str(exc)) from None
        if raw is None:
            return None
        try:
            state = decode(ThreadState, raw)
        except DecodeError as exc:
            log.warning("stored state of thread %s does not decode, taken as new: %s",
                        thread_id, exc, extra={"partition": self.partition})
            return None
        if state.thread_id != thread_id:  # another writer's record: deciding on it raised
            log.warning("stored state of thread %s names thread %s, taken as new",
                        thread_id, state.thread_id, extra={"partition": self.partition})
            return None
        self.cache.put(key, state, _charge(raw))
        return state

    def _keys(self) -> Iterator[str]:
        assert self.store is not None
        seen = set(self.pending)
        yield from seen
        for key in self.store.data_keys():
            text = thread_of(key)
            if text is not None and text not in seen:
                yield text


def thread_of(key: bytes) -> str | None:
    """The threadId a ``threads`` key names; None for a key that is not UTF-8: no thread's
    (the gatekeeper writes every key from a threadId), so not read as another thread."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _charge(raw: bytes) -> int:
    return len(raw) * DECODED_PER_BYTE + ENTRY_BYTES


def changes(_: int, records: Sequence[Any]) -> list[Change]:
    """What ``threads`` records change in a store (``changelog.catch_up``'s ``Changes``).

    The value is kept as written; a tombstone deletes; a record without a key,
    with a key that is not UTF-8, or whose value is not JSON, changes nothing (as
    ``store.restore`` skips it).
    """
    out: list[Change] = []
    for record in records:
        if record.key is None or thread_of(record.key) is None:
            log.warning("threads record without key skipped" if record.key is None else
                        "threads record whose key is not UTF-8 skipped",
                        extra={"partition": record.partition, "offset": record.offset})
            continue
        if record.value is None:
            out.append((record.key, None, None))
            continue
        try:
            mark = slim_raw(record.value)
        except ValueError:  # orjson's JSONDecodeError is one
            log.warning("threads record is not JSON, skipped",
                        extra={"partition": record.partition, "offset": record.offset})
            continue
        out.append((record.key, record.value, mark))
    return out


class Threads:
    """One instance's thread stores: where they live, their cache, their last restores."""

    name = STORE_NAME

    def __init__(self, root: Path, changelog: str, cache_mb: int, grace_s: float) -> None:
        self.dir = StateDir(root / STORE_NAME, changelog, grace_s)
        self.cache: ByteLRU[ThreadState] = ByteLRU(cache_mb << 20)
        self.open: dict[int, ThreadStates] = {}
        self.restored: dict[int, Restored] = {}
        self._started = False
        metrics.watch(self)

    async def opened(self, partition: int) -> tuple[ThreadStates, str | None]:
        """Partition ``partition``'s states over its store, and why it was wiped (if it was);
        waits while another process on this machine still holds the store."""
        if not self._started:
            self.dir.start()
            self._started = True
        store, wiped = await self.dir.open_waiting(partition)
        states = ThreadStates(partition, store=store, cache=self.cache)
        self.open[partition] = states
        return states, wiped

    def release(self, partitions: list[int]) -> None:
        """Partitions handed back: close their stores (deleted after the grace period)."""
        for p in partitions:
            states = self.open.pop(p, None)
            self.restored.pop(p, None)
            if states is None or states.store is None:
                continue
            if states.pending:
                states.flush(None)
            states.forget_cached()
            self.dir.release(p, states.store)

    def close(self) -> None:
        self.release(list(self.open))
        self.dir.stop()

    def failing(self) -> dict[str, str]:
        """The stores that cannot be written now (``/readyz``), by name."""
        return {f"state-store-{p}": f"cannot be written, {len(s.pending)} states held in "
                                    f"memory: {s.failure}"
                for p, s in self.open.items() if s.failure is not None}

    def samples(self) -> tuple[list[metrics.PartitionSample], metrics.CacheSample]:
        out = []
        for p, states in sorted(self.open.items()):
            if states.store is None:
                continue
            restored = self.restored.get(p)
            out.append(metrics.PartitionSample(
                p, states.store.disk_bytes(), _checkpoint(states.store),
                restored.records if restored else 0, restored.seconds if restored else 0.0))
        return out, metrics.CacheSample(self.cache.bytes, self.cache.hits, self.cache.misses)


def _checkpoint(store: PartitionStore) -> int | None:
    try:
        return store.checkpoint
    except StoreError:
        return None


def _decoded(marks: list[tuple[bytes, bytes]],
             pending: dict[str, ThreadState]) -> Iterator[tuple[str, ThreadState]]:
    """The watched states among ``marks``, then ``pending`` (newer: they replace marks)."""
    for key, mark in marks:
        thread_id = thread_of(key)
        if thread_id is None or thread_id in pending:
            continue
        try:
            state = ThreadState.model_validate_json(mark)
        except ValueError:  # pydantic's ValidationError is one
            continue  # a thread whose record did not decode: not watched
        if state.thread_id != thread_id:
            continue  # keyed for another thread: not this one's (``_lookup``)
        if watched(state):
            yield thread_id, state
    for thread_id, state in pending.items():
        if watched(state):
            yield thread_id, state
