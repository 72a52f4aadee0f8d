"""Bringing partition stores up to their changelog on assignment (the Kafka half).

For each partition: wait until no transaction is open on its changelog
partition (the last stable offset is the end: an open one would pin the
stable offset below records committed after it), ``plan`` the restore from
the store's checkpoint and the partition's first and stable end offsets,
wipe the store when the plan says so (logging why), then read the records
from the plan's start up to that end, ``read_committed``, and write them in
chunks, each chunk with the offset after its last record in the same
write batch, and the end itself last (control records close the log). A
store killed mid-restore therefore resumes from its last chunk.

What a record becomes in the store is the owner's (``Changes``): a
gatekeeper keeps a thread state's bytes as written and marks threads not
idle; a record it cannot read changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.kafka.clients import ConsumerRecord, KafkaError, TopicPartition, new_consumer
from services.kafka.lookup import client_of
from services.kafka.topic_ids import topic_ids
from services.runtime.settings import KafkaSettings
from services.state.disk import Change, PartitionStore
from services.state.plan import Plan, plan

log = logging.getLogger(__name__)

POLL_MS = 10
"""``getmany`` returns as soon as records come; with none it returns at this timeout, and
the positions tell whether the ends were reached. Short, because a store's delta is
often only the last transaction's commit marker, which no poll returns as a record."""
OPEN_POLL_S = 0.05
CHUNK = 5000
"""Records written per write batch while restoring."""

HANGING_AFTER_S = 2.0
"""How long a partition stays open before ``Hanging`` is asked to close it."""

Changes = Callable[[int, Sequence[ConsumerRecord[Any, Any]]], Iterable[Change]]
"""What records of partition p change in its store."""
Hanging = Callable[[list[TopicPartition]], Awaitable[None]]
"""Closes this writer's transactions left open on these partitions (``services.kafka.hanging``)."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What restoring one partition did."""

    partition: int
    plan: Plan
    records: int
    """Changelog records read (and applied)."""
    seconds: float


async def catch_up(
    settings: KafkaSettings,
    topic: str,
    stores: Mapping[int, tuple[PartitionStore, str | None]],
    changes: Changes,
    client_id: str,
    hanging: Hanging | None = None,
) -> dict[int, Restored]:
    """Bring each partition's store (with why it was wiped, if it was) up to ``topic``."""
    tps = {p: TopicPartition(topic, p) for p in sorted(stores)}
    if not tps:
        return {}
    started = time.monotonic()
    consumer = new_consumer(settings, client_id, group_id=None, max_poll_records=CHUNK)
    await consumer.start()
    try:
        consumer.assign(list(tps.values()))
        ends = await closed_ends(settings, consumer, list(tps.values()), client_id, hanging)
        firsts: dict[TopicPartition, int] = await consumer.beginning_offsets(list(tps.values()))
        topic_id = await topic_id_of(consumer, topic)
        plans: dict[int, Plan] = {}
        for p, tp in tps.items():
            store, wiped = stores[p]
            plans[p] = chosen = plan(store.checkpoint, wiped or "no checkpoint",
                                     firsts[tp], ends[tp], store.topic_id, topic_id)
            if chosen.full:
                if wiped is None:
                    store.reopen_fresh()
                log.warning("state store of %s p%d: full restore from the topic (%d offsets): %s",
                            topic, p, chosen.expected, chosen.reason)
            else:
                log.info("state store of %s p%d: %s", topic, p, chosen.reason)
            consumer.seek(tp, chosen.start)
        counts = await _read(consumer, tps, ends, stores, changes)
        seconds = time.monotonic() - started
        for p, tp in tps.items():
            stores[p][0].write((), ends[tp], topic_id)
            log.info("state store of %s p%d restored: %d records read (%s restore) in %.0f ms",
                     topic, p, counts[p], "full" if plans[p].full else "delta", seconds * 1000,
                     extra={"partition": p, "records": counts[p], "full": plans[p].full})
    finally:
        await consumer.stop()
    return {p: Restored(p, plans[p], counts[p], seconds) for p in tps}


async def topic_id_of(consumer: Any, topic: str) -> str | None:
    """``topic``'s id, or None from a broker that does not give one (before Kafka 2.8): the
    plan then trusts the offsets alone, as it did before ids were kept."""
    try:
        return (await topic_ids(client_of(consumer), [topic])).get(topic)
    except (KafkaError, NotImplementedError) as exc:
        log.warning("the id of %s could not be read (%r): a store of a topic recreated under "
                    "its name is told only by its offsets", topic, exc)
        return None


async def read_again(
    settings: KafkaSettings,
    topic: str,
    stores: Mapping[int, PartitionStore],
    changes: Changes,
    client_id: str,
) -> dict[int, int]:
    """Bring stores already in use up to ``topic`` without wiping them (another owner in
    this process still serves them): from each checkpoint, or the first offset when the
    topic cannot account for it, to the end. Returns the records read per partition."""
    tps = {p: TopicPartition(topic, p) for p in sorted(stores)}
    if not tps:
        return {}
    consumer = new_consumer(settings, client_id, group_id=None, max_poll_records=CHUNK)
    await consumer.start()
    try:
        consumer.assign(list(tps.values()))
        ends = await closed_ends(settings, consumer, list(tps.values()), client_id)
        firsts: dict[TopicPartition, int] = await consumer.beginning_offsets(list(tps.values()))
        for p, tp in tps.items():
            chosen = plan(stores[p].checkpoint, "no checkpoint", firsts[tp], ends[tp])
            consumer.seek(tp, chosen.start)
        counts = await _read(consumer, tps, ends, {p: (s, None) for p, s in stores.items()},
                             changes)
        for p, tp in tps.items():
            stores[p].write((), ends[tp])
    finally:
        await consumer.stop()
    return counts


async def _read(
    consumer: Any,
    tps: dict[int, TopicPartition],
    ends: dict[TopicPartition, int],
    stores: Mapping[int, tuple[PartitionStore, str | None]],
    changes: Changes,
) -> dict[int, int]:
    counts = dict.fromkeys(tps, 0)
    remaining = {tp for tp in tps.values() if await consumer.position(tp) < ends[tp]}
    while remaining:
        got = await consumer.getmany(*remaining, timeout_ms=POLL_MS)
        for tp, records in got.items():
            taken = [r for r in records if r.offset < ends[tp]]
            if taken:
                p = tp.partition
                stores[p][0].write(changes(p, taken), taken[-1].offset + 1)
                counts[p] += len(taken)
        remaining = {tp for tp in remaining if await consumer.position(tp) < ends[tp]}
    return counts


async def closed_ends(
    settings: KafkaSettings,
    committed: Any,
    tps: list[TopicPartition],
    client_id: str,
    hanging: Hanging | None = None,
) -> dict[TopicPartition, int]:
    """The partitions' last stable offsets, once each is its end (no transaction open).

    ``committed`` is a started ``read_committed`` consumer. ``hanging``, given
    by the changelog's own writer once its producer has started (nothing of
    its own can be open then), is asked once, after ``HANGING_AFTER_S``, to
    close what is still open: a transaction whose markers the broker skipped.
    """
    everything = new_consumer(settings, f"{client_id}-ends", group_id=None, read_committed=False)
    await everything.start()
    try:
        started = warned = time.monotonic()
        while True:
            stable: dict[TopicPartition, int] = await committed.end_offsets(tps)
            ends: dict[TopicPartition, int] = await everything.end_offsets(tps)
            if stable == ends:
                return stable
            if hanging is not None and time.monotonic() - started > HANGING_AFTER_S:
                still = [tp for tp in tps if stable[tp] != ends[tp]]
                log.warning("a transaction is still open on %s after %.0f s; closing this "
                            "writer's own, which the broker may have left hanging",
                            sorted(tp.partition for tp in still), HANGING_AFTER_S)
                await hanging(still)
                hanging = None
            if time.monotonic() - warned > 5:
                warned = time.monotonic()
                log.warning(
                    "a transaction is still open on %s after %.0f s; restoring waits for it",
                    sorted(tp.partition for tp in tps if stable[tp] != ends[tp]),
                    warned - started,
                )
            await asyncio.sleep(OPEN_POLL_S)
    finally:
        await everything.stop()
