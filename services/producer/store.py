"""The checkpoints topic as a per-thread cache: restore owned partitions, write through.

A worker restores a checkpoints partition (compacted: the last record per
thread wins) when it is assigned the same partition of a ``dispatch`` topic —
both are keyed by threadId and have as many partitions, so they map one to
one. Each hosted agent's dispatch topic maps onto the same checkpoints
partitions, so a partition is read once for all of them: an agent assigned a
partition another agent is still restoring waits for that read to finish (else
it would find no left-open run and re-run one). From then on it is the only
writer of those threads until one moves to another agent, whose workers may be
other processes: the dispatch that moves it says so (``Dispatch.handover``),
and ``handover`` reads on until the other agent's run shows closed before the
run starts. ``update`` applies a pure change
(``services.producer.checkpoint``) to the cached record and writes the result
through, returning once the broker has it. Changes are applied and enqueued
under one lock, so records of a thread reach the topic in the order they were
made and the latest one holds every change. A change whose record would not
fit the broker's limit is not applied and not sent: ``RecordTooLargeError``
(``checkpoint_too_large``, from ``sizes.RecordGuard``), the cached record
unchanged; ``excess`` asks the same question before a run commits to an
ending. ``ThreadLedger`` is the ``EffectLedger`` over it.

With ``AGUI_STATE_DIR`` the checkpoints are not all held in memory: each
owned partition's live in its on-disk store behind a bounded cache
(``checkpoint_disk``), a restore reads only what the topic gained since, and
``threads`` lists only the checkpoints with a run active (all recovery needs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from contracts import DecodeError
from services.kafka.clients import AIOKafkaProducer, ConsumerRecord
from services.kafka.partitioning import hashed_among, partition_for
from services.kafka.reader import Start, TopicReader
from services.kafka.size_refusals import TOO_LARGE
from services.producer import checkpoint as cp
from services.producer.checkpoint_disk import CheckpointDisk
from services.producer.effects import Effect
from services.producer.sizes import RecordGuard
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

Change = Callable[[cp.ThreadCheckpoint], cp.ThreadCheckpoint]
CHECKPOINT_CODE = "checkpoint_too_large"
HANDOVER_POLL_S = 0.1
"""How often ``handover`` reads again while the previous run shows open."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class CheckpointStore:
    """Cached thread checkpoints of the partitions this worker owns."""

    def __init__(self, settings: KafkaSettings, producer: AIOKafkaProducer,
                 clock: Callable[[], datetime] = utc_now,
                 disk: CheckpointDisk | None = None) -> None:
        self.disk = disk
        """The on-disk stores (``AGUI_STATE_DIR``); None: every checkpoint in memory."""
        self.settings = settings
        self.topic = settings.topics.checkpoints
        self.producer = producer
        self.clock = clock
        self.guard = RecordGuard.of(settings.max_record_bytes)
        self._threads: dict[str, cp.ThreadCheckpoint] = {}
        self._partition_of: dict[str, int] = {}
        self._offset_of: dict[str, float] = {}
        """Where each cached checkpoint stands in its partition (inf: this worker's write,
        not acknowledged yet), so a partition read again keeps only what is newer."""
        self._owners: dict[int, set[str]] = {}
        self._loading: dict[int, asyncio.Future[int]] = {}
        """Partitions being read, by the read (other owners wait for it)."""
        self._read_to: dict[int, int] = {}
        """Where the last read of each partition ended (in memory): a handover reads on
        from there rather than the whole partition again."""
        self._reading_again = asyncio.Lock()
        """One read again at a time (handovers of two threads, a new owner): each keeps
        what this worker wrote meanwhile, which two at once would not."""
        self._lock = asyncio.Lock()

    def get(self, thread_id: str) -> cp.ThreadCheckpoint:
        """The thread's checkpoint (a fresh one when it has none)."""
        return self.known(thread_id) or cp.fresh(thread_id)

    def known(self, thread_id: str) -> cp.ThreadCheckpoint | None:
        """The thread's checkpoint, or None when it has none."""
        if self.disk is not None:
            return self.disk.get(thread_id)
        return self._threads.get(thread_id)

    def threads(self, partitions: Iterable[int]) -> list[cp.ThreadCheckpoint]:
        """Every restored checkpoint in ``partitions`` (with a store: those with a run
        active, which is what recovery looks for)."""
        if self.disk is not None:
            return self.disk.active(partitions)
        wanted = set(partitions)
        return [c for t, c in self._threads.items() if self._partition_of.get(t) in wanted]

    async def restore(self, partitions: Iterable[int], owner: str) -> int:
        """Load ``partitions`` (those not held for another owner yet); returns records read.

        Returns only once every one of ``partitions`` is loaded, also those another
        owner is still loading (their reading is awaited, not repeated).
        """
        todo: list[int] = []
        fresh_owner: list[int] = []
        pending: set[asyncio.Future[int]] = set()
        for p in sorted(set(partitions)):
            holders = self._owners.setdefault(p, set())
            if not holders:
                todo.append(p)
            elif (loading := self._loading.get(p)) is not None:
                pending.add(loading)
            elif owner not in holders:
                fresh_owner.append(p)
            holders.add(owner)
        read = 0
        if todo:
            task = asyncio.ensure_future(self._load(todo))
            for p in todo:
                self._loading[p] = task
            try:
                read = await asyncio.shield(task)
            finally:
                for p in todo:
                    if self._loading.get(p) is task:
                        del self._loading[p]
        for loading in pending:
            await asyncio.shield(loading)
        if fresh_owner:
            read += await self._catch_up(fresh_owner, "a new owner")
        return read

    async def handover(self, thread_id: str, run_id: str, agent: str, within_s: float) -> bool:
        """Bring ``thread_id``'s checkpoint up to what its previous run ``run_id`` left.

        Another agent ran it (``Dispatch.handover``), so another worker may have
        written the checkpoint since this one read the partition; beginning the next
        run from the older record would lose that run's interrupts, closed runs and
        effects, and overwrite them. The partition is read on while the checkpoint
        shows ``run_id`` begun and not ended: its end marker is written just after its
        terminal event, which is what let the gatekeeper admit the next run. False when
        it still shows open after ``within_s`` (its worker died before the marker; the
        one taking its partition over writes it).
        """
        current = self.known(thread_id)
        if current is not None and cp.has_closed(current, run_id):
            return True  # this store wrote that end itself (one worker hosts both agents)
        count = len(await self.producer.partitions_for(self.topic))
        partition = partition_for(thread_id, hashed_among(self.settings.partitions, count))
        deadline = asyncio.get_running_loop().time() + within_s
        while True:
            await self._catch_up([partition], f"run {run_id} of agent {agent}")
            current = self.known(thread_id)
            if current is None or current.active is None or current.active.run_id != run_id:
                return True
            if asyncio.get_running_loop().time() >= deadline:
                log.warning("thread %s: run %s of agent %s still shows open in its checkpoint "
                            "after %g s; the next run starts from it", thread_id[:64], run_id,
                            agent, within_s)
                return False
            await asyncio.sleep(HANDOVER_POLL_S)

    async def _catch_up(self, partitions: list[int], why: str) -> int:
        """Read ``partitions`` again for an owner that joins those already loaded, or for a
        handover: another worker may have written checkpoints there since (its agent's
        partitions are assigned apart from this worker's agents'), and a takeover or the
        thread's next run must see them. The
        newer of the record and the cached value wins, by offset (with a store: the
        threads this worker writes during the read keep their own)."""
        async with self._reading_again:
            if self.disk is not None:
                read = await self.disk.read_again(self.settings, self.topic, partitions)
            else:
                records, _ = await self._read(partitions, since=self._read_to)
                self._cache(records, newer_only=True)
                read = len(records)
        log.info("read %d checkpoint records again from partitions %s of %s for %s",
                 read, partitions, self.topic, why)
        return read

    async def _load(self, todo: list[int]) -> int:
        """Read partitions ``todo`` of the topic into the cache; returns records read."""
        if self.disk is not None:
            async with TopicReader(self.settings, "agui-relay-producer-restore") as reader:
                count = await reader.partition_count(self.topic)
            return await self.disk.restore(self.settings, self.topic, todo, count)
        records, count = await self._read(todo)
        self._cache(records, newer_only=False)
        log.info("restored %d checkpoint records from partitions %s of %s (%d partitions)",
                 len(records), todo, self.topic, count)
        return len(records)

    def _cache(self, records: list[ConsumerRecord[Any, Any]], *, newer_only: bool) -> None:
        """Keep each record's checkpoint (``newer_only``: unless the cache holds a later one)."""
        for record in records:
            try:
                value = cp.from_bytes(record.value)
            except DecodeError as exc:
                log.warning("skipping unreadable checkpoint at %s/%d@%d: %s", record.topic,
                            record.partition, record.offset, exc)
                continue
            if newer_only and record.offset <= self._offset_of.get(value.thread_id, -1):
                continue
            self._threads[value.thread_id] = value
            self._partition_of[value.thread_id] = record.partition
            self._offset_of[value.thread_id] = record.offset

    async def _read(self, todo: list[int], since: Mapping[int, int] | None = None
                    ) -> tuple[list[ConsumerRecord[Any, Any]], int]:
        """Every record of partitions ``todo`` up to their current ends (from ``since``
        where it names the partition, else its beginning), and the partition count."""
        async with TopicReader(self.settings, "agui-relay-producer-restore") as reader:
            count = await reader.partition_count(self.topic)
            tps = [tp for tp in await reader.all_partitions(self.topic) if tp.partition in todo]
            known = since or {}
            ends = await reader.assign(tps, Start.after(
                {tp: known[tp.partition] for tp in tps if tp.partition in known}))
            records = [r async for batch in reader.batches(until=ends) for r in batch]
        self._read_to.update({tp.partition: ends[tp] for tp in tps})
        return records, count

    def release(self, partitions: Iterable[int], owner: str) -> None:
        """Forget ``partitions`` once no owner holds them."""
        dropped = set()
        for p in set(partitions):
            holders = self._owners.get(p, set())
            holders.discard(owner)
            if not holders:
                self._owners.pop(p, None)
                dropped.add(p)
        if self.disk is not None:
            self.disk.release(dropped)
            return
        for p in dropped:
            self._read_to.pop(p, None)
        for thread_id in [t for t, p in self._partition_of.items() if p in dropped]:
            self._threads.pop(thread_id, None)
            self._partition_of.pop(thread_id, None)
            self._offset_of.pop(thread_id, None)

    async def update(self, thread_id: str, change: Change) -> cp.ThreadCheckpoint:
        """Apply ``change`` to the thread's checkpoint and write it; returns once durable.

        ``RecordTooLargeError`` when the record would not fit, or the broker refused it
        for its size (``checkpoints`` takes less than ``AGUI_MAX_RECORD_BYTES``)."""
        written = await self.write(thread_id, change)
        try:
            metadata = await written
        except TOO_LARGE as exc:
            raise self.guard.refused_by_broker(
                f"the checkpoint of thread {thread_id[:64]!r}", self.topic, CHECKPOINT_CODE,
                thread_id.encode(), cp.to_bytes(self.get(thread_id))) from exc
        if self.disk is None:
            self._partition_of[thread_id] = metadata.partition
        return self.get(thread_id)

    def place(self, thread_id: str, partition: int) -> None:
        """Tell the store the partition the default partitioner gives ``thread_id`` here,
        when the caller already hashed the key for a topic of as many partitions (the
        producer then need not hash it again for the first write)."""
        if self.disk is None:
            self._partition_of.setdefault(thread_id, partition)

    def excess(self, thread_id: str, change: Change) -> int | None:
        """The size of the record ``change`` would write when it would not fit, else None."""
        value = cp.to_bytes(change(self.get(thread_id)))
        return self.guard.limit.excess(thread_id.encode(), value)

    async def write(self, thread_id: str, change: Change) -> asyncio.Future[Any]:
        """Apply ``change`` and send it; the future resolves once it is durable.

        ``RecordTooLargeError`` when the record would not fit: nothing changes.
        """
        async with self._lock:
            value = change(self.get(thread_id))
            key, data = thread_id.encode(), cp.to_bytes(value)
            self.guard.check(f"the checkpoint of thread {thread_id[:64]!r}", CHECKPOINT_CODE,
                             key, data)
            if self.disk is not None:
                return await self._write_through(value, key, data)
            self._threads[thread_id] = value
            self._offset_of[thread_id] = float("inf")
            # The thread's partition once known (the key's, as the broker placed it): the
            # producer need not hash the key again.
            sent: asyncio.Future[Any] = await self.producer.send(
                self.topic, data, key=key, partition=self._partition_of.get(thread_id))

            def acknowledged(done: asyncio.Future[Any]) -> None:
                if (not done.cancelled() and done.exception() is None
                        and self._threads.get(thread_id) is value):
                    self._offset_of[thread_id] = done.result().offset

            sent.add_done_callback(acknowledged)
            return sent

    async def _write_through(self, value: cp.ThreadCheckpoint, key: bytes,
                             data: bytes) -> asyncio.Future[Any]:
        """``write`` with a store: held in memory until acknowledged, then stored with its
        offset (the acknowledgement's callback: they come in offset order)."""
        disk = self.disk
        assert disk is not None
        disk.written(value)
        sent: asyncio.Future[Any] = await self.producer.send(
            self.topic, data, key=key, partition=disk.partition(value.thread_id))

        def acknowledged(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is None:
                meta = done.result()
                disk.durable(value, data, meta.partition, meta.offset)

        sent.add_done_callback(acknowledged)
        return sent


class ThreadLedger:
    """Side effects recorded in the threads' checkpoints (an ``EffectLedger``)."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    async def begin(self, thread_id: str, key: str, run_id: str) -> Effect | None:
        known: list[cp.Execution] = []
        now = self.store.clock()

        def start(c: cp.ThreadCheckpoint) -> cp.ThreadCheckpoint:
            found = cp.execution(c, key)
            if found is not None:  # checked under the store's lock: one begin wins
                known.append(found)
                return c
            return cp.effect_started(c, key=key, run_id=run_id, now=now)

        await self.store.update(thread_id, start)
        if not known:
            return None
        if known[0].status == "done":
            return Effect("already_performed", known[0].result)
        return Effect("outcome_unknown")

    async def complete(self, thread_id: str, key: str, result: Any) -> None:
        now = self.store.clock()
        await self.store.update(thread_id, lambda c: cp.effect_done(c, key=key, result=result,
                                                                    now=now))
