"""A worker's thread checkpoints in on-disk stores (``AGUI_STATE_DIR``), behind a cache.

The checkpoints topic is compacted and keyed by threadId; a worker owns the
partitions of it that match the dispatch partitions it is assigned. Without
a state directory ``CheckpointStore`` holds every checkpoint of them in a
dict, read in full on every assignment. With one, each owned partition's
checkpoints live in its RocksDB store (``services.state``): a lookup reads
what the worker wrote and is not durable yet (``pending``), then the cache
of decoded checkpoints (``AGUI_STATE_CACHE_MB``), then the store; the
store learns a checkpoint once the broker has acknowledged its record. The
store's offset says that every record before it is applied, so it moves
past an acknowledged record only when that record is the next one
(records of a partition are acknowledged in order): other workers' agents
write the same partitions, and their records between two of ours are not
in the store. A restore reads only the records after that offset, or all
of them when the store cannot be trusted (``services.state.changelog``),
and checkpoints with a run still active are marked, so recovery finds the
runs a dead worker left open without a scan. A partition this worker
already holds for one agent and now takes over for another is read again
from that offset (``read_again``) while it stays in use: what the read
brings is applied except for the threads this worker itself writes
meanwhile, whose own records are newer. A failed store write keeps the
checkpoint in ``pending`` (it is on the topic) and is retried with the
next one. A store whose files vanished or were replaced under the worker
(``StoreLostError``) is never written again nor recreated: its checkpoints
stay in memory (``unwritten``, read before the store) and the partition is
failing until it is handed back (its next owner rebuilds the store).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from contracts import DecodeError
from services.kafka.partitioning import hashed_among, partition_for
from services.producer import checkpoint as cp
from services.runtime.settings import KafkaSettings
from services.state import metrics
from services.state.cache import ByteLRU
from services.state.changelog import Restored, catch_up, read_again
from services.state.dirs import StateDir
from services.state.disk import (
    Change,
    PartitionStore,
    StoreError,
    StoreLostError,
    reported_lost,
)

log = logging.getLogger(__name__)

STORE_NAME = "producer-checkpoints"
ACTIVE = b"active"
"""The mark of a checkpoint with a run active (recovery reads the checkpoint itself)."""
DECODED_PER_BYTE = 9
"""Charged per byte of JSON for a decoded checkpoint in the cache (as thread states are)."""


def active_raw(value: bytes) -> bool | None:
    """Whether a checkpoint record has a run active, read without validating (None: not
    JSON)."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return bool(doc.get("active")) if isinstance(doc, dict) else None


def changes(_: int, records: Sequence[Any]) -> list[Change]:
    """What checkpoint records change in a store (as ``CheckpointStore`` reads them)."""
    out: list[Change] = []
    for record in records:
        if record.key is None:
            continue
        if record.value is None:
            out.append((record.key, None, None))
            continue
        active = active_raw(record.value)
        if active is None:
            log.warning("skipping unreadable checkpoint at %s/%d@%d", record.topic,
                        record.partition, record.offset)
            continue
        out.append((record.key, record.value, ACTIVE if active else None))
    return out


class CheckpointDisk:
    """The owned partitions' checkpoint stores, their cache and what is not durable yet."""

    name = STORE_NAME

    def __init__(self, root: Path, changelog: str, cache_mb: int, grace_s: float) -> None:
        self.dir = StateDir(root / STORE_NAME, changelog, grace_s)
        self.cache: ByteLRU[cp.ThreadCheckpoint] = ByteLRU(cache_mb << 20)
        self.stores: dict[int, PartitionStore] = {}
        self.pending: dict[str, cp.ThreadCheckpoint] = {}
        self.unwritten: dict[int, dict[bytes, tuple[bytes, bytes | None]]] = {}
        """Per partition, acknowledged records the store could not take yet."""
        self.restored: dict[int, Restored] = {}
        self.partitions = 0
        """How many of the checkpoints topic's partitions a thread is hashed among (known
        once a restore ran: ``partitioning.hashed_among``)."""
        self.failures: dict[int, str] = {}
        """Partitions whose store could not be written, and why (``failing``)."""
        self.lost: set[int] = set()
        """Partitions whose store's files vanished or were replaced: never written again
        (a read looks in ``unwritten`` first), failing until they are handed back."""
        self.rereading: dict[int, set[bytes]] = {}
        """Partitions being read again, with the threads written here meanwhile."""
        self._started = False
        metrics.watch(self)

    async def restore(self, settings: KafkaSettings, topic: str, todo: list[int],
                      count: int) -> int:
        """Bring the stores of ``todo`` up to ``topic``; returns records read."""
        self.partitions = hashed_among(settings.partitions, count)
        if not self._started:
            self.dir.start()
            self._started = True
        opened = {}
        try:
            for p in todo:
                opened[p] = await self.dir.open_waiting(p)
            done = await catch_up(settings, topic, opened, changes,
                                  "agui-relay-producer-restore")
        except BaseException:
            for p, (store, _) in opened.items():
                self.dir.release(p, store)
            raise
        for p, (store, _) in opened.items():
            self.stores[p] = store
            self.cache.drop_partition(p)
        self.restored.update(done)
        return sum(r.records for r in done.values())

    async def read_again(self, settings: KafkaSettings, topic: str,
                         partitions: list[int]) -> int:
        """Bring held partitions up to ``topic`` for a new owner; returns records read."""
        held = {p: self.stores[p] for p in partitions if p in self.stores}
        for p in held:  # in flight, or acknowledged but not stored yet: newer than the topic's
            self.rereading[p] = {t.encode() for t in self.pending if self.partition(t) == p}
            self.rereading[p].update(self.unwritten.get(p, {}))
        try:
            counts = await read_again(settings, topic, held, self._unless_written_here,
                                      "agui-relay-producer-restore")
        finally:
            for p in held:
                self.rereading.pop(p, None)
        return sum(counts.values())

    def _unless_written_here(self, p: int, records: Sequence[Any]) -> list[Change]:
        """``changes`` for a partition read again: not for threads written here since the
        read began (their own record is newer), and each applied one leaves the cache."""
        skipped = self.rereading.get(p, set())
        out = [c for c in changes(p, records) if c[0] not in skipped]
        for key, _, _ in out:
            self.cache.drop((p, key.decode()))
        return out

    def get(self, thread_id: str) -> cp.ThreadCheckpoint | None:
        found = self.pending.get(thread_id)
        if found is not None:
            return found
        p = self.partition(thread_id)
        store = self.stores.get(p) if p is not None else None
        if p is None or store is None:
            return None
        cached = self.cache.get((p, thread_id))
        if cached is not None:
            return cached
        held = self.unwritten.get(p, {}).get(thread_id.encode())
        raw = held[0] if held is not None else store.get(thread_id.encode())
        if raw is None:
            return None
        try:
            value = cp.from_bytes(raw)
        except DecodeError as exc:
            log.warning("stored checkpoint of thread %s does not decode, taken as none: %s",
                        thread_id, exc)
            return None
        self.cache.put((p, thread_id), value, len(raw) * DECODED_PER_BYTE)
        return value

    def partition(self, thread_id: str) -> int | None:
        return partition_for(thread_id, self.partitions) if self.partitions else None

    def active(self, partitions: Iterable[int]) -> list[cp.ThreadCheckpoint]:
        """The checkpoints of ``partitions`` with a run active (from the stores' marks, and
        those acknowledged that the store could not take yet)."""
        out = []
        for p in sorted(set(partitions)):
            store = self.stores.get(p)
            if store is None:
                continue
            held = self.unwritten.get(p, {})
            keys = [k for k, _ in store.marked() if k not in held]
            keys += [k for k, (_, mark) in held.items() if mark is not None]
            for key in keys:
                found = self.get(key.decode())
                if found is not None and found.active is not None:
                    out.append(found)
        return out

    def written(self, value: cp.ThreadCheckpoint) -> None:
        """A checkpoint sent (not durable yet): read from memory until it is."""
        self.pending[value.thread_id] = value
        if self.rereading and (p := self.partition(value.thread_id)) in self.rereading:
            self.rereading[p].add(value.thread_id.encode())

    def durable(self, value: cp.ThreadCheckpoint, data: bytes, partition: int,
                offset: int) -> None:
        """Its record is acknowledged at ``offset``: into the store, with the offset after
        when no other writer's record came between."""
        if self.pending.get(value.thread_id) is value:
            del self.pending[value.thread_id]
        store = self.stores.get(partition)
        if store is None:  # handed back meanwhile: the next owner reads it from the topic
            return
        self.cache.put((partition, value.thread_id), value, len(data) * DECODED_PER_BYTE)
        waiting = self.unwritten.setdefault(partition, {})
        waiting[value.thread_id.encode()] = (data, ACTIVE if value.active is not None else None)
        if partition in self.lost:
            with contextlib.suppress(StoreError):
                store.check()  # leaves the note of a vanished store, once it fits
            return
        try:
            if partition in self.failures:
                store.reopen()  # RocksDB stays read-only after a failed write until reopened
            store.write([(k, v, m) for k, (v, m) in waiting.items()],
                        offset + 1 if store.checkpoint == offset else None)
        except StoreLostError as exc:
            self.failures[partition] = reported_lost(log, "checkpoint store", partition, exc,
                                                     "the checkpoints topic")
            self.lost.add(partition)
            return
        except StoreError as exc:
            if partition not in self.failures:
                log.error("checkpoint store of partition %d cannot be written (%d checkpoints "
                          "kept in memory until it can, not ready): %s", partition, len(waiting),
                          exc)
            self.failures[partition] = str(exc)
            return
        if self.failures.pop(partition, None) is not None:
            log.warning("checkpoint store of partition %d written again", partition)
        waiting.clear()

    def failing(self) -> dict[str, str]:
        """The stores that cannot be written now (``/readyz``), by name."""
        return {f"checkpoint-store-{p}": why for p, why in self.failures.items()}

    def release(self, partitions: Iterable[int]) -> None:
        for p in set(partitions):
            store = self.stores.pop(p, None)
            self.unwritten.pop(p, None)
            self.failures.pop(p, None)
            self.lost.discard(p)
            self.restored.pop(p, None)
            self.cache.drop_partition(p)
            for thread_id in [t for t in self.pending if self.partition(t) == p]:
                del self.pending[thread_id]
            if store is not None:
                self.dir.release(p, store)

    def close(self) -> None:
        self.release(list(self.stores))
        self.dir.stop()

    def samples(self) -> tuple[list[metrics.PartitionSample], metrics.CacheSample]:
        out = []
        for p, store in sorted(self.stores.items()):
            restored = self.restored.get(p)
            out.append(metrics.PartitionSample(
                p, store.disk_bytes(), store.checkpoint,
                restored.records if restored else 0, restored.seconds if restored else 0.0))
        return out, metrics.CacheSample(self.cache.bytes, self.cache.hits, self.cache.misses)
