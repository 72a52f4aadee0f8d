"""What a failed transaction did, learned from Kafka once it is settled.

When ``commit_outputs`` raises, the instance's transaction may have committed
after all (``commit_transaction`` raised while the broker had accepted the
commit: the connection closed with the response in flight, the broker
stopped) or not. Guessing either way breaks exactly-once: taking a committed
batch for failed decides its requests again against the old thread states,
dispatching their runs twice; taking a failed one for committed skips them.

So the instance's producer is replaced first (by ``commit``). The new
producer's ``init_transactions``, with the same transactional id, aborts the
transaction if it is still open, and waits for a commit the broker had
already accepted to complete. Then, for every partition p the transaction
carried, the group's committed offsets of ``requests`` p and ``runs`` p,
which commit in the same transaction, say what happened (``judge``):

- ``committed``: they are the failed transaction's offsets; it is installed
  as if ``commit_outputs`` had returned;
- ``aborted``: they are still those of the last success; memory is exact,
  reading rewinds to them;
- ``unknown``: anything else, or offsets that could not tell; p is read again
  as an assignment reads it, thread states from ``threads`` p (read
  committed) with the group's offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from services.gatekeeper.left_open import LeftOpen
from services.gatekeeper.partition import Owned
from services.gatekeeper.store import reread
from services.gatekeeper.threadstore import ThreadStates
from services.kafka.clients import AIOKafkaConsumer, KafkaError, TopicPartition
from services.kafka.fencing import stable_committed
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

Outcome = Literal["committed", "aborted", "unknown"]
Offsets = tuple[int, int]
"""The next offsets to read of ``requests`` p and ``runs`` p."""


def judge(before: Offsets, attempted: Offsets, found: Offsets) -> Outcome:
    """How a settled transaction ended, from the group's committed offsets.

    ``before``: what the last successful transaction committed; ``attempted``:
    what the failed one carried; ``found``: what the group has now.
    """
    if attempted == before:
        return "unknown"  # committed or not, the offsets look the same
    if found == attempted:
        return "committed"
    if found == before:
        return "aborted"
    return "unknown"


@dataclass(frozen=True, slots=True)
class Settled:
    """What Kafka holds for partition p after the failed transaction was settled."""

    outcome: Outcome
    offsets: Offsets
    """The group's committed offsets of ``requests`` p and ``runs`` p."""
    states: ThreadStates | None = None
    """p's thread states read back from ``threads`` (only when ``unknown``)."""


async def settle(
    owned: Owned,
    attempted: dict[TopicPartition, int],
    kafka: KafkaSettings,
    consumer: AIOKafkaConsumer,
    client_id: str,
    hanging: LeftOpen | None = None,
) -> Settled:
    """Once the producer is replaced: learn from the group's offsets what p's share did
    (``hanging`` closes what the broker left open of the failed transaction, which
    would keep the offsets unstable, or ``threads`` p open, for ever)."""
    before = (owned.committed_request, owned.committed_event)
    tried = (attempted[owned.requests], attempted[owned.runs])
    backoff = 0.5
    while True:
        try:
            found_by_tp = await committed_offsets(consumer, [owned.requests, owned.runs],
                                                  hanging.close_all if hanging else None)
            found = (found_by_tp[owned.requests], found_by_tp[owned.runs])
            outcome = judge(before, tried, found)
            states = None
            if outcome == "unknown":
                states = await reread(kafka, owned.states, f"{client_id}-restore",
                                      hanging.close if hanging else None)
            return Settled(outcome, found, states)
        except KafkaError:
            log.warning(
                "could not read back partition %d; retrying in %.1f s",
                owned.partition,
                backoff,
                exc_info=True,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)


async def committed_offsets(
    consumer: AIOKafkaConsumer,
    partitions: list[TopicPartition],
    hanging: Callable[[], Awaitable[None]] | None = None,
) -> dict[TopicPartition, int]:
    """The group's committed offsets once stable, or a partition's first offset when none.

    Stable: an open transaction holding offsets for one of them (a dead or
    fenced owner's) has first committed, aborted or timed out (KIP-447).
    ``hanging`` closes this producer id's own the broker left open.
    """
    found = await stable_committed(consumer, partitions, hanging=hanging)
    missing = [tp for tp, offset in found.items() if offset is None]
    first = await consumer.beginning_offsets(missing) if missing else {}
    return {tp: int(offset if offset is not None else first[tp]) for tp, offset in found.items()}
