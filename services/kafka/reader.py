"""Group-less reading of chosen partitions: from the start, the end or an instant.

Operators and replays read topics without joining a consumer group: they
assign the partitions they want (one thread's partition, or all), choose
where to begin (``Start``), and either follow live or stop at the end offsets
captured when they began (``ends``), so a bounded read is deterministic
even while producers keep writing. Records come in batches sorted by their
timestamp, which interleaves several topics readably. Only committed
records are read.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from services.kafka.clients import (
    AIOKafkaAdminClient,
    AIOKafkaConsumer,
    ConsumerRecord,
    TopicPartition,
    new_admin,
    new_consumer,
)
from services.kafka.partitioning import hashed_among, partition_for
from services.runtime.settings import KafkaSettings

T = TypeVar("T")

__all__ = ["Start", "TopicReader", "UnknownTopicError"]


class UnknownTopicError(LookupError):
    """A topic the cluster does not have (not created yet, or another prefix)."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist (run `agui-relay topics create`?)")
        self.topic = topic


@dataclass(frozen=True, slots=True)
class Start:
    """Where to begin reading each assigned partition."""

    kind: Literal["beginning", "end", "time", "offsets"]
    timestamp_ms: int | None = None
    offsets: Mapping[TopicPartition, int] | None = None

    @classmethod
    def beginning(cls) -> Start:
        return cls("beginning")

    @classmethod
    def end(cls) -> Start:
        return cls("end")

    @classmethod
    def at(cls, timestamp_ms: int) -> Start:
        """The first record whose timestamp is at or after ``timestamp_ms`` (the beginning
        for one at or before the epoch: Kafka refuses a negative time to look up, and one
        thread started "at the epoch" had held back every thread lapsing with it)."""
        return cls("time", timestamp_ms) if timestamp_ms > 0 else cls.beginning()

    @classmethod
    def after(cls, offsets: Mapping[TopicPartition, int]) -> Start:
        """Each partition at its offset in ``offsets`` (its beginning when absent)."""
        return cls("offsets", offsets=dict(offsets))


class TopicReader:
    """One group-less consumer over partitions the caller assigns."""

    def __init__(self, settings: KafkaSettings, client_id: str = "agui-relay-reader", *,
                 read_committed: bool = True) -> None:
        self._consumer: AIOKafkaConsumer = new_consumer(settings, client_id, group_id=None,
                                                        read_committed=read_committed)
        self._admin: AIOKafkaAdminClient = new_admin(settings, client_id)
        self._admin_started = False
        self._assigned: list[TopicPartition] = []
        self._counts: dict[str, int] = {}
        self._hashed = settings.partitions

    async def __aenter__(self) -> TopicReader:
        try:
            await self._consumer.start()
        except BaseException:
            await self._consumer.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._consumer.stop()
        finally:
            if self._admin_started:
                await self._admin.close()

    async def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has, from the cluster's metadata."""
        if topic not in self._counts:
            if not self._admin_started:
                await self._admin.start()
                self._admin_started = True
            for described in await self._admin.describe_topics([topic]):
                if described.get("error_code", 0) == 0 and described.get("partitions"):
                    self._counts[described["topic"]] = len(described["partitions"])
        if topic not in self._counts:
            raise UnknownTopicError(topic)
        return self._counts[topic]

    async def all_partitions(self, topic: str) -> list[TopicPartition]:
        """Every partition of ``topic``."""
        return [TopicPartition(topic, p) for p in range(await self.partition_count(topic))]

    async def key_partition(self, topic: str, key: str) -> TopicPartition:
        """The partition the relay's producers give ``key`` in ``topic`` (among
        AGUI_PARTITIONS of its partitions: ``partitioning``)."""
        count = hashed_among(self._hashed, await self.partition_count(topic))
        return TopicPartition(topic, partition_for(key, count))

    async def assign(
        self, partitions: Sequence[TopicPartition], start: Start
    ) -> dict[TopicPartition, int]:
        """Read ``partitions`` from ``start``; returns their end offsets as of now."""
        self._assigned = list(partitions)
        self._consumer.assign(self._assigned)
        ends: dict[TopicPartition, int] = await self._consumer.end_offsets(self._assigned)
        if start.kind == "beginning":
            await self._consumer.seek_to_beginning(*self._assigned)
        elif start.kind == "end":
            for tp in self._assigned:
                self._consumer.seek(tp, ends[tp])
        elif start.kind == "offsets":
            assert start.offsets is not None
            unknown = [tp for tp in self._assigned if tp not in start.offsets]
            if unknown:  # (no argument would mean every assigned partition)
                await self._consumer.seek_to_beginning(*unknown)
            for tp in self._assigned:
                if tp in start.offsets:
                    self._consumer.seek(tp, start.offsets[tp])
        else:
            assert start.timestamp_ms is not None
            found = await self._consumer.offsets_for_times(
                dict.fromkeys(self._assigned, start.timestamp_ms)
            )
            for tp in self._assigned:
                hit = found.get(tp)
                self._consumer.seek(tp, hit.offset if hit is not None else ends[tp])
        return ends

    async def end_offsets(
        self, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """End offsets now, of ``partitions`` or the assigned ones: the last stable offsets
        (the high watermarks for a reader made with ``read_committed=False``)."""
        wanted = list(partitions) if partitions is not None else self._assigned
        ends: dict[TopicPartition, int] = await self._consumer.end_offsets(wanted)
        return ends

    async def start_offsets(self, partitions: Sequence[TopicPartition]
                            ) -> dict[TopicPartition, int]:
        """Each partition's first offset now (its log start: what retention left)."""
        starts: dict[TopicPartition, int] = await self._consumer.beginning_offsets(
            list(partitions))
        return starts

    async def _reached(self, ends: Mapping[TopicPartition, int]) -> bool:
        for tp in self._assigned:
            if await self._consumer.position(tp) < ends.get(tp, 0):
                return False
        return True

    async def batches(
        self,
        *,
        until: Mapping[TopicPartition, int] | None = None,
        stop: asyncio.Event | None = None,
        poll_ms: int = 200,
        heartbeat: bool = False,
    ) -> AsyncGenerator[list[ConsumerRecord[Any, Any]], None]:
        """Batches of records, oldest first, until ``until`` is reached or ``stop`` is set.

        Without ``until`` the read follows live until ``stop``. With
        ``heartbeat`` an empty batch is yielded after each idle poll, so a
        caller waiting for something can check its own deadline. The
        partitions of a batch are interleaved by timestamp, each kept in its
        offset order: a writer's clock that stepped back had reordered a
        partition's records when the batch was sorted by timestamp, and a
        run's events came out of sequence (found by probing).
        """
        while not (stop is not None and stop.is_set()):
            if until is not None and await self._reached(until):
                return
            got = await self._consumer.getmany(*self._assigned, timeout_ms=poll_ms)
            parts = [batch if until is None else
                     [r for r in batch if r.offset < until.get(tp, 0)]
                     for tp, batch in sorted(got.items())]
            records = list(heapq.merge(*parts, key=lambda r: r.timestamp))
            if records or heartbeat:
                yield records

    async def records_between(self, starts: Mapping[TopicPartition, int],
                              ends: Mapping[TopicPartition, int], *,
                              within_s: float = 5.0) -> dict[TopicPartition, int] | None:
        """How many records a reader of this isolation would read in each partition from
        its offset in ``starts`` up to ``ends``: what is between may be only transaction
        markers (a group that has read everything commits the offset of the commit marker
        that follows, one short of the end), which no reader ever gets. None when the
        read does not end within ``within_s``."""
        counted = dict.fromkeys(starts, 0)
        if not starts:
            return counted

        async def count() -> None:
            await self.assign(list(starts), Start.after(starts))
            async for batch in self.batches(until=ends):
                for record in batch:
                    counted[TopicPartition(record.topic, record.partition)] += 1

        try:
            await asyncio.wait_for(count(), within_s)
        except TimeoutError:
            return None
        return counted

    async def read_all(
        self, partitions: Sequence[TopicPartition], start: Start | None = None
    ) -> list[ConsumerRecord[Any, Any]]:
        """Everything in ``partitions`` from ``start`` (default: beginning) up to now."""
        out: list[ConsumerRecord[Any, Any]] = []
        async for batch in self.read_batches(partitions, start):
            out.extend(batch)
        return out

    async def read_batches(
        self, partitions: Sequence[TopicPartition], start: Start | None = None
    ) -> AsyncGenerator[list[ConsumerRecord[Any, Any]], None]:
        """What ``read_all`` reads, batch by batch: a caller that keeps a few records of
        a shared partition holds one batch at a time, not the partition's history (a
        resumed pipeline parent held its child's whole ``events`` partition to keep
        the child's few records: found by probing)."""
        ends = await self.assign(partitions, start or Start.beginning())
        async for batch in self.batches(until=ends):
            yield batch

    async def read_latest(
        self, partitions: Sequence[TopicPartition]
    ) -> list[ConsumerRecord[Any, Any]]:
        """The last record of each key in ``partitions`` up to now (a compacted topic's
        live view: a tombstone included, as the last word on its key), in offset order.
        Kept as it is read, so memory follows the live keys, not the history: compaction
        leaves a day of a busy topic's history uncompacted, and ``agui-relay stuck`` held
        all of it (found by probing)."""
        return await self.latest_shaped(partitions, lambda record: record)

    async def latest_shaped(self, partitions: Sequence[TopicPartition],
                            shape: Callable[[ConsumerRecord[Any, Any]], T]) -> list[T]:
        """``read_latest``, each record kept as ``shape`` makes it when it is read: a
        listing that keeps a row per key holds rows, not records (``agui-relay threads``
        held every record and then every decoded state of 250,000 threads, 2 GB: found by
        probing). A key's earlier records are shaped too, then replaced."""
        ends = await self.assign(partitions, Start.beginning())
        last: dict[tuple[int, Any], T] = {}
        async for batch in self.batches(until=ends):
            for record in batch:
                where = (record.partition, record.key)
                last.pop(where, None)  # re-inserted: the dict stays in offset order
                last[where] = shape(record)
        return list(last.values())


MARKER_PROBE = 16
"""Gaps up to this many offsets are read to tell transaction markers from records."""


async def unread_records(reader: TopicReader, wanted: Iterable[tuple[TopicPartition, int]],
                         ends: Mapping[TopicPartition, int]
                         ) -> dict[tuple[TopicPartition, int], int]:
    """For each (partition, offset) at most ``MARKER_PROBE`` short of its end: how many
    records a reader would still read from there (0 when only transaction markers lie
    between). Read in rounds of one offset per partition; a round that does not end in
    time is left out (the caller shows the raw gap)."""
    pending = sorted({(tp, start) for tp, start in wanted
                      if 0 < ends.get(tp, start) - start <= MARKER_PROBE})
    found: dict[tuple[TopicPartition, int], int] = {}
    while pending:
        round_: dict[TopicPartition, int] = {}
        later = []
        for tp, start in pending:
            if tp in round_:
                later.append((tp, start))
            else:
                round_[tp] = start
        counted = await reader.records_between(round_, ends)
        if counted is not None:
            found.update({(tp, start): counted[tp] for tp, start in round_.items()})
        pending = later
    return found

