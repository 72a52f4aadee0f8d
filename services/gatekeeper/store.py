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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from contracts import DecodeError, ThreadState, decode
from services.kafka.clients import TopicPartition, new_consumer
from services.runtime.settings import KafkaSettings
from services.state.changelog import closed_ends

log = logging.getLogger(__name__)

POLL_MS = 200


async def restore(
    settings: KafkaSettings, partitions: Iterable[int], client_id: str = "agui-gatekeeper-restore"
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
        ends = await closed_ends(settings, consumer, tps, client_id)
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
    thread_id = key.decode("utf-8", "replace")
    if value is None:
        states.pop(thread_id, None)
        return
    try:
        states[thread_id] = decode(ThreadState, value)
    except DecodeError as exc:
        log.warning(
            "threads record does not decode, skipped: %s",
            exc,
            extra={"threadId": thread_id, "partition": tp.partition, "offset": offset},
        )
