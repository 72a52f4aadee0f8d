"""The thread view on disk (``AGUI_STATE_DIR``): one store per ``threads`` partition.

Without a state directory the thread view (``threads``) keeps every thread's
latest state in memory as raw bytes and reads the compacted topic from the
beginning at every start. With one, ``ThreadStore`` keeps them in RocksDB
stores (``services.state``), one per partition of ``threads`` under
``<AGUI_STATE_DIR>/consumer-threads/<threads topic>/<instance>/p<n>`` (the
topic's name, prefix included, as ``services.state.dirs`` lays stores out: two
deployments sharing a directory never share a store), and memory is bounded
by ``AGUI_STATE_CACHE_MB`` (the decoded states cached in front of
``GET /threads/{id}``), not by the number of threads:

- ``restore`` on start brings each store up to the topic's last stable
  offset (``changelog.catch_up``: only the records after the store's
  checkpoint, or all of them when the store cannot be trusted, wiped with a
  log line saying why) and returns where the view goes on reading;
- ``write`` takes each batch the view polls, with the offset after its last
  record, in one write batch per partition;
- threads holding open interrupts are *marked* with their state, so the
  inbox's index (``interrupts``) is rebuilt from the marks alone (``marked``)
  instead of a scan of every thread.

``<instance>`` is the instance's advertised address (host and port): every
instance of the consumer service reads every partition of ``threads``, so
two instances on one machine sharing ``AGUI_STATE_DIR`` keep stores of their
own (``StateDir``'s lock would make the second wait, then fail).

A write that fails (a full disk) loses nothing: the view keeps the states it
could not write in memory (``pending``, looked up first), tries them again
with the next batch after reopening the store, and ``failing`` names the
partition for ``/readyz`` until a write succeeds. A store whose files vanished
or were replaced under it (``StoreLostError``) is never written again nor
recreated, and a lookup the store answers with an error raises (the route
answers 503, never "unknown thread"): either partition stays failing until a
restart rebuilds its store from the topic.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from contracts import DecodeError, ThreadState, decode
from services.kafka.partitioning import hashed_among, partition_for
from services.runtime.settings import KafkaSettings
from services.state import metrics
from services.state.cache import ByteLRU
from services.state.changelog import Restored, catch_up
from services.state.dirs import StateDir
from services.state.disk import (
    Change,
    PartitionStore,
    StoreError,
    StoreLostError,
    reported_lost,
)

log = logging.getLogger(__name__)

STORE_NAME = "consumer-threads"
DECODED_PER_BYTE = 9
"""A decoded ThreadState takes ~8.7 times its JSON in memory (the gatekeeper's measure,
``services.gatekeeper.threadstore``); cached entries are charged 9 times, plus
``ENTRY_BYTES``."""
ENTRY_BYTES = 200
GRACE_S = 600.0
"""Stores of partitions the topic no longer has are deleted after this long."""


def instance_name(url: str) -> str:
    """A directory name for the instance advertised at ``url`` (``127.0.0.1_8000``)."""
    bare = re.sub(r"^[a-z]+://", "", url.strip().rstrip("/"))
    return re.sub(r"[^A-Za-z0-9.-]+", "_", bare) or "default"


def interrupted(value: bytes) -> bool:
    """Whether a thread state record holds open interrupts (read without validating it;
    a value that is not a JSON object holds none)."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(doc, dict) and bool(doc.get("openInterrupts"))


def changes(_: int, records: Sequence[Any]) -> list[Change]:
    """What ``threads`` records change in a store: the value as written (a tombstone
    deletes), marked with itself when it holds open interrupts; no key, no change."""
    out: list[Change] = []
    for record in records:
        if record.key is None:
            continue
        value = record.value
        out.append((record.key, value,
                    value if value is not None and interrupted(value) else None))
    return out


class ThreadStore:
    """One instance's thread-view stores, their cache and their last restores."""

    name = STORE_NAME

    def __init__(self, root: Path, changelog: str, instance: str, cache_mb: int,
                 grace_s: float = GRACE_S) -> None:
        self.dir = StateDir(root / STORE_NAME / changelog, instance, grace_s)
        self.cache: ByteLRU[ThreadState] = ByteLRU(cache_mb << 20)
        self.stores: dict[int, PartitionStore] = {}
        self.among: int | None = None
        """AGUI_PARTITIONS (known once ``restore`` ran): a thread's state is among so many
        of the stores; None: among all of them."""
        self.restored: dict[int, Restored] = {}
        self.pending: dict[int, dict[str, bytes | None]] = {}
        """Per partition: states read from the topic that its store could not take yet."""
        self.failures: dict[int, str] = {}
        self.lost: set[int] = set()
        """Partitions whose store's files vanished or were replaced: never written again."""
        self.unreadable: dict[int, str] = {}
        """Partitions whose store answered a lookup with an error, and the error."""
        metrics.watch(self)

    async def restore(self, kafka: KafkaSettings, partitions: Sequence[int]) -> dict[int, int]:
        """Open and catch up each partition's store; the offset to read each one from."""
        self.dir.start()
        self.among = kafka.partitions
        opened: dict[int, tuple[PartitionStore, str | None]] = {}
        try:
            for p in partitions:
                opened[p] = await self.dir.open_waiting(p)
                self.stores[p] = opened[p][0]
            self.restored = await catch_up(kafka, kafka.topics.threads, opened, changes,
                                           "agui-consumer-threads-restore")
        except BaseException:
            self.close()
            raise
        return {p: store.checkpoint or 0 for p, store in self.stores.items()}

    @property
    def records_restored(self) -> int:
        """Changelog records the last ``restore`` read, all partitions."""
        return sum(r.records for r in self.restored.values())

    def marked(self) -> Iterator[tuple[str, bytes]]:
        """Every thread holding open interrupts, with its state (no scan of the others)."""
        for p, store in sorted(self.stores.items()):
            waiting = self.pending.get(p, {})
            for key, value in store.marked():
                thread_id = key.decode("utf-8", "replace")
                if thread_id not in waiting:
                    yield thread_id, value
            for thread_id, held in waiting.items():
                if held is not None and interrupted(held):
                    yield thread_id, held

    def count(self) -> int:
        """The threads the stores hold, counted by a scan of their keys (for a log line,
        not the hot path); a store that cannot be read counts none."""
        total = 0
        for store in list(self.stores.values()):
            try:
                total += sum(1 for _ in store.data_keys())
            except StoreError as exc:
                log.warning("thread view store %s cannot be counted: %s", store.path, exc)
        return total

    def get(self, thread_id: str) -> ThreadState | None:
        """The thread's latest state: pending, cached, or read from its partition's store
        (the one ``threads`` keys it to; ``restore`` opens one store per partition), not
        looked up in every store."""
        p = self._partition(thread_id)
        if p is None:
            return None
        waiting = self.pending.get(p, {})
        if thread_id in waiting:
            return decoded(thread_id, waiting[thread_id])
        cached = self.cache.get(thread_id)
        if cached is not None:
            return cached
        raw = self._read(p, thread_id)
        state = decoded(thread_id, raw)
        if state is not None and raw is not None:
            self.cache.put(thread_id, state, len(raw) * DECODED_PER_BYTE + ENTRY_BYTES)
        return state

    def raw(self, thread_id: str) -> bytes | None:
        """The thread's latest state record as written (pending or stored), undecoded."""
        p = self._partition(thread_id)
        if p is None:
            return None
        waiting = self.pending.get(p, {})
        if thread_id in waiting:
            return waiting[thread_id]
        return self._read(p, thread_id)

    def _partition(self, thread_id: str) -> int | None:
        if not self.stores:
            return None
        count = len(self.stores)
        among = count if self.among is None else hashed_among(self.among, count)
        return partition_for(thread_id, among)

    def _read(self, p: int, thread_id: str) -> bytes | None:
        store = self.stores.get(p)
        if store is None:
            return None
        try:
            return store.get(thread_id.encode())
        except StoreError as exc:
            if p not in self.unreadable:
                log.error("thread view store of partition %d cannot be read, its threads are "
                          "answered 503 (not ready) until a restart rebuilds it: %s", p, exc)
                self.unreadable[p] = str(exc)
            raise

    def write(self, partition: int, records: Sequence[Any]) -> None:
        """A polled batch of ``partition``, with the offset after its last record."""
        if not records:
            return
        waiting = self.pending.setdefault(partition, {})
        for record in records:
            if record.key is not None:
                thread_id = record.key.decode("utf-8", "replace")
                self.cache.drop(thread_id)
                waiting[thread_id] = record.value
        store = self.stores[partition]
        if partition in self.lost:
            with contextlib.suppress(StoreError):
                store.check()  # leaves the note of a vanished store, once it fits
            return
        batch = [(t.encode(), v, v if v is not None and interrupted(v) else None)
                 for t, v in waiting.items()]
        try:
            if partition in self.failures:
                store.reopen()
            store.write(batch, records[-1].offset + 1)
        except StoreLostError as exc:
            self.failures[partition] = reported_lost(log, "thread view store", partition, exc,
                                                     "the threads topic")
            self.lost.add(partition)
            return
        except StoreError as exc:
            if partition not in self.failures:
                log.error("thread view store of partition %d cannot be written, keeping %d "
                          "states in memory until it can (not ready): %s",
                          partition, len(waiting), exc)
            self.failures[partition] = str(exc)
            return
        if self.failures.pop(partition, None) is not None:
            log.warning("thread view store of partition %d written again", partition)
        self.pending.pop(partition, None)

    def failing(self) -> dict[str, str]:
        """The stores that cannot be written or read now (``/readyz``), by name."""
        out = {f"thread-store-{p}": f"cannot be written, {len(self.pending.get(p, {}))} "
                                    f"states held in memory: {why}"
               for p, why in self.failures.items()}
        for p, why in self.unreadable.items():
            out[f"thread-store-{p}"] = f"cannot be read (restart to rebuild it): {why}"
        return out

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
        self.stores.clear()
        self.dir.stop()

    def samples(self) -> tuple[list[metrics.PartitionSample], metrics.CacheSample]:
        out = []
        for p, store in sorted(self.stores.items()):
            restored = self.restored.get(p)
            try:
                offset = store.checkpoint
            except StoreError:
                offset = None
            out.append(metrics.PartitionSample(
                p, store.disk_bytes(), offset, restored.records if restored else 0,
                restored.seconds if restored else 0.0))
        return out, metrics.CacheSample(self.cache.bytes, self.cache.hits, self.cache.misses)


def decoded(thread_id: str, raw: bytes | None) -> ThreadState | None:
    """A stored state decoded; None (with a log line) when there is none, it is unreadable
    or it names another thread than its key (another writer's: never served under the key,
    as ``GET /threads/{id}`` would answer for a thread it does not describe)."""
    if raw is None:
        return None
    try:
        state = decode(ThreadState, raw)
    except DecodeError as exc:
        log.warning("unreadable thread state: %s", exc, extra={"threadId": thread_id})
        return None
    if state.thread_id != thread_id:
        log.warning("thread state keyed for thread %s names thread %s: skipped", thread_id,
                    state.thread_id, extra={"threadId": thread_id})
        return None
    return state
