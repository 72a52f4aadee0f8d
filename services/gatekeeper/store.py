"""Restoring thread states from the compacted ``threads`` topic (the changelog).

The gatekeeper's memory of every thread is its changelog: each transaction
writes the new state of every thread it changed to ``threads``, on the same
partition number as the ``requests``/``events`` partition it consumed, with
the consumed offsets. So when a partition is assigned, reading that
``threads`` partition from the beginning to its last stable offset
(``read_committed``) yields exactly the states that belong with the group's
committed offsets, and deciding may start — once no transaction is open on
the partition: an open one (a zombie's, or a dead owner's under a
transactional id nobody reuses) pins the last stable offset below records
committed after it, so reading would pair older states with newer offsets.
Restoring therefore first waits until the last stable offset is the end of
the partition; only the owner writes there, and the broker aborts any
transaction left open once it times out.

A record that does not decode is logged and skipped (the thread restarts
from a later record or from nothing); a tombstone forgets its thread.

With ``AGUI_STATE_DIR`` (``take_over``) each partition's states are in its
on-disk store (``threadstore``), which reads only the ``threads`` records
after the offset it reflects (``services.state.changelog.catch_up``, the
same wait for a closed partition first), or all of them when the store
cannot be trusted; without it (``restore``), every record, into memory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from contracts import DecodeError, ThreadState, decode
from services.gatekeeper.threadstore import Threads, ThreadStates, changes
from services.kafka.clients import TopicPartition, new_consumer
from services.runtime.settings import KafkaSettings
from services.state.changelog import Hanging, catch_up, closed_ends

log = logging.getLogger(__name__)

POLL_MS = 200


async def take_over(
    settings: KafkaSettings,
    threads: Threads | None,
    partitions: Iterable[int],
    client_id: str,
    hanging: Hanging | None = None,
) -> dict[int, ThreadStates]:
    """Each partition's committed thread states: its store brought up to ``threads``, or
    (no state directory) every record read into memory. ``hanging`` closes this writer's
    transactions the broker left open (``closed_ends``)."""
    numbers = sorted(set(partitions))
    if threads is None:
        restored = await restore(settings, numbers, client_id, hanging)
        return {p: ThreadStates(p, memory=restored[p]) for p in numbers}
    opened: dict[int, tuple[ThreadStates, str | None]] = {}
    try:
        for p in numbers:
            opened[p] = await threads.opened(p)
        done = await catch_up(settings, settings.topics.threads,
                              {p: (states.store, why) for p, (states, why) in opened.items()
                               if states.store is not None},
                              changes, client_id, hanging)
    except BaseException:
        threads.release(numbers)
        raise
    threads.restored.update(done)
    return {p: states for p, (states, _) in opened.items()}


async def reread(settings: KafkaSettings, states: ThreadStates, client_id: str,
                 hanging: Hanging | None = None) -> ThreadStates:
    """Partition p's committed states read again after a transaction of unknown outcome:
    its store caught up with ``threads`` (it holds only committed states), or every record
    (``hanging``: as ``take_over``'s)."""
    if states.store is None:
        restored = await restore(settings, [states.partition], client_id, hanging)
        return ThreadStates(states.partition, memory=restored[states.partition])
    states.pending.clear()  # committed ones, all on the changelog: caught up below
    states.forget_cached()
    await catch_up(settings, settings.topics.threads, {states.partition: (states.store, None)},
                   changes, client_id, hanging)
    return states


async def restore(
    settings: KafkaSettings,
    partitions: Iterable[int],
    client_id: str = "agui-gatekeeper-restore",
    hanging: Hanging | None = None,
) -> dict[int, dict[str, ThreadState]]:
    """Every thread state in ``partitions`` of ``threads``, by partition and threadId."""
    topic = settings.topics.threads
    tps = [TopicPartition(topic, p) for p in sorted(set(partitions))]
    states: dict[int, dict[str, ThreadState]] = {tp.partition: {} for tp in tps}
    if not tps:
        return states
    consumer = new_consumer(settings, client_id, group_id=None, max_poll_records=5000)
    await consumer.start()
    try:
        consumer.assign(tps)
        ends = await closed_ends(settings, consumer, tps, client_id, hanging)
        await consumer.seek_to_beginning(*tps)
        remaining = {tp for tp in tps if ends.get(tp, 0) > 0}
        while remaining:
            got = await consumer.getmany(*remaining, timeout_ms=POLL_MS)
            for tp, records in got.items():
                for record in records:
                    if record.offset < ends[tp]:
                        _apply(states[tp.partition], record.key, record.value, tp, record.offset)
            remaining = {tp for tp in remaining if await consumer.position(tp) < ends[tp]}
    finally:
        await consumer.stop()
    return states


def _apply(
    states: dict[str, ThreadState],
    key: bytes | None,
    value: bytes | None,
    tp: TopicPartition,
    offset: int,
) -> None:
    if key is None:
        log.warning(
            "threads record without key skipped",
            extra={"partition": tp.partition, "offset": offset},
        )
        return
    try:
        thread_id = key.decode("utf-8")
    except UnicodeDecodeError:
        log.warning(
            "threads record whose key is not UTF-8 skipped",
            extra={"partition": tp.partition, "offset": offset},
        )
        return
    if value is None:
        states.pop(thread_id, None)
        return
    try:
        state = decode(ThreadState, value)
    except DecodeError as exc:
        log.warning(
            "threads record does not decode, skipped: %s",
            exc,
            extra={"threadId": thread_id, "partition": tp.partition, "offset": offset},
        )
        return
    if state.thread_id != thread_id:  # another writer's: deciding on it raised, for ever
        log.warning(
            "threads record keyed for thread %s names thread %s, skipped",
            thread_id, state.thread_id,
            extra={"threadId": thread_id, "partition": tp.partition, "offset": offset},
        )
        return
    states[thread_id] = state


def summary(restored: Iterable[ThreadStates]) -> str:
    """What a takeover restored, for its log line."""
    found = list(restored)
    in_memory = [s.memory for s in found if s.memory is not None]
    stored = [s for s in found if s.store is not None]
    parts = []
    if in_memory:
        parts.append(f"{sum(map(len, in_memory))} threads restored")
    if stored:
        parts.append(f"{len(stored)} stores brought up to their changelog")
    return ", ".join(parts) or "nothing restored"
