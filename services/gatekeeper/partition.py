"""One owned partition: its thread states, positions and held requests.

A gatekeeper instance owns partition p of ``requests`` and ``runs`` (the run
boundaries; it never reads ``events``) and restores p of ``threads``.
Everything it knows about p lives here: the committed thread states, the
offsets committed with them, how far it has read, and the requests it holds
back until ``runs`` p has been read far enough (see ``commit``). The
instance's one transactional producer, whose id names the partitions it
owns, commits every partition's batches together.
This module also turns a decided ``Batch`` into the records its transaction
writes; it does no I/O itself but start the producer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from contracts import TopicCatalog, encode
from services.gatekeeper import wire
from services.gatekeeper.batch import Batch, Poison, Source, trace_headers
from services.gatekeeper.stall import Seen
from services.gatekeeper.threadstore import ThreadStates
from services.kafka.clients import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRecord,
    KafkaError,
    TopicPartition,
    new_producer,
)
from services.kafka.transactions import OutRecord
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 10
"""Transactional retries (e.g. CONCURRENT_TRANSACTIONS) after 10 ms, not aiokafka's 100."""
TRANSACTION_TIMEOUT_MS = 15_000
"""How long an instance that died mid-transaction under an id nobody reuses holds up the
next owner of its partitions (the stable offset fetch waits for it), not aiokafka's 60 s."""


def transactional_id(prefix: str, partitions: Iterable[int]) -> str:
    """The transactional id of the producer for ``partitions``, e.g. ``<prefix>.gatekeeper.p0-3,6``.

    Named by the partitions, so an instance restarted onto the same
    assignment fences its dead predecessor at once (``init_transactions``
    aborts what it left open) instead of waiting for the transaction timeout.
    Owners of other assignments are fenced by group generation (``fencing``).
    """
    return f"{prefix}.gatekeeper.p{_ranges(sorted(set(partitions)))}"


def _ranges(numbers: list[int]) -> str:
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


async def start_producer(
    kafka: KafkaSettings, client_id: str, partitions: Iterable[int], *, retry: bool = False
) -> AIOKafkaProducer:
    """The transactional producer for ``partitions``, started (which fences its last user).

    With ``retry`` a broker that does not answer is waited for, with backoff,
    instead of failing: the partitions cannot make progress without it.
    """
    txn_id = transactional_id(kafka.topic_prefix, partitions)
    backoff = 0.5
    while True:
        producer = new_producer(
            kafka,
            client_id,
            transactional_id=txn_id,
            retry_backoff_ms=RETRY_BACKOFF_MS,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        )
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            if not retry:
                raise
            log.warning("producer %s did not start (%s); retrying in %.1f s", txn_id, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)
            continue
        return producer


@dataclass(slots=True)
class Owned:
    """What this instance holds for one partition number it owns.

    Reading runs ahead of deciding: records are *routed* here as they are
    polled (run boundaries into ``inbox``, requests into ``held``) while the
    partition's last transaction may still be committing; they are *applied*
    and decided in the partition's next batch. ``epoch`` moves on every
    rewind, so records polled before one are recognised and dropped.
    """

    partition: int
    requests: TopicPartition
    runs: TopicPartition
    """Partition p of ``runs``: the boundary records (``*_event`` offsets are in it)."""
    states: ThreadStates
    """The committed thread states: in memory, or p's store behind the cache."""
    committed_request: int
    committed_event: int
    next_request: int = -1
    """Offset after the last request record routed into ``held``."""
    next_event: int = -1
    """The consumer's position in ``runs`` as of the last routing."""
    applied_event: int = -1
    """Offset after the last event applied to ``states`` (committed with them)."""
    inbox: list[ConsumerRecord[Any, Any]] = field(default_factory=list)
    """Events routed, not yet applied."""
    held: list[ConsumerRecord[Any, Any]] = field(default_factory=list)
    """Requests routed, not yet decided (waiting for their batch or for ``runs``)."""
    barrier: int | None = None
    """The ``runs`` last stable offset the held requests wait for."""
    held_since: float | None = None
    waiting_since: float | None = None
    """When the oldest routed record not yet in a batch arrived (for ``linger_ms``)."""
    inflight: asyncio.Future[None] | None = None
    """Set while the partition's last batch waits for or rides a transaction; no new batch
    starts before it ends."""
    epoch: int = 0
    last_commit: float = 0.0
    poison: dict[Source, Poison] = field(default_factory=dict)
    """Inputs whose outputs the broker refused: the next batch dead-letters them."""

    def __post_init__(self) -> None:
        if self.next_request < 0:
            self.next_request = self.committed_request
        if self.next_event < 0:
            self.next_event = self.committed_event
        if self.applied_event < 0:
            self.applied_event = self.committed_event

    def offsets(self) -> dict[TopicPartition, int]:
        """The next offsets to read, as a transaction commits them."""
        first_undecided = self.held[0].offset if self.held else self.next_request
        return {self.requests: first_undecided, self.runs: self.applied_event}

    def advanced(self) -> bool:
        """True when reading moved past what was last committed."""
        offsets = self.offsets()
        return (offsets[self.requests], offsets[self.runs]) != (
            self.committed_request,
            self.committed_event,
        )

    def committed(self, offsets: dict[TopicPartition, int], batch: Batch | None,
                  changelog: int | None = None) -> None:
        """Install what a successful transaction wrote (``changelog``: the offset after
        its records on ``threads`` p, when known, checkpointed with the states)."""
        if batch is not None:
            self.states.install(batch.states, batch.encoded, changelog)
        self.committed_request = offsets[self.requests]
        self.committed_event = offsets[self.runs]
        if self.poison:  # what is committed is never read again
            ends = {self.requests.topic: self.committed_request,
                    self.runs.topic: self.committed_event}
            self.poison = {s: p for s, p in self.poison.items() if s[2] >= ends.get(s[0], 0)}

    def read_again_from(self, request_offset: int, event_offset: int) -> None:
        """Forget what was routed and not yet decided; reading restarts at these offsets."""
        self.next_request = request_offset
        self.next_event = self.applied_event = event_offset
        self.inbox, self.held = [], []
        self.barrier = self.held_since = self.waiting_since = None
        self.epoch += 1

    def rewound(self) -> None:
        """Back to the last commit (a transaction failed)."""
        self.read_again_from(self.committed_request, self.committed_event)


def paired(assigned: Iterable[TopicPartition], requests: str,
           runs: str) -> tuple[set[TopicPartition], set[TopicPartition]]:
    """``assigned`` split into the partitions held with their partner (p of ``requests``
    with p of ``runs``) and the others, which cannot be decided here.

    The range assignor pairs them when every member reads the same two topics of one
    partition count; a member reading others (a gatekeeper of an earlier version, which
    read ``events``) or topics that disagree on their count would leave halves.
    """
    numbers = {topic: {tp.partition for tp in assigned if tp.topic == topic}
               for topic in (requests, runs)}
    both = numbers[requests] & numbers[runs]
    kept = {tp for tp in assigned if tp.topic in numbers and tp.partition in both}
    return kept, set(assigned) - kept


async def progress(consumer: AIOKafkaConsumer, owned: Iterable[Owned]) -> dict[int, Seen]:
    """What the stall rule needs of each partition: committed offsets, and input waiting.

    Input waits when records are routed and undecided, a batch rides a
    transaction, or ``requests`` p or ``runs`` p has records past the read
    position (the last stable offset, as of the last fetch, beyond it).
    """
    seen: dict[int, Seen] = {}
    for o in list(owned):
        try:
            lag = [(consumer.last_stable_offset(tp) or 0) - await consumer.position(tp)
                   for tp in (o.requests, o.runs)]
        except KafkaError:  # not assigned any more (a rebalance): seen again when it is
            continue
        waiting = bool(o.held or o.inbox or o.inflight is not None) or max(lag) > 0
        seen[o.partition] = Seen((o.committed_request, o.committed_event), waiting)
    return seen


def outputs(topics: TopicCatalog, partition: int, batch: Batch) -> list[OutRecord]:
    """The records one partition's transaction writes for ``batch``.

    Decisions and dispatches carry the request's ``traceparent`` when it had
    one; thread states go to partition p of ``threads`` whatever their key
    hashes to, so restoring p finds them. Each record's ``source`` is the
    input it was made from (a thread state: the last input that changed it),
    for ``commit`` to set aside should the broker refuse it.
    """
    out: list[OutRecord] = []
    for d in batch.decided:
        decision = d.decision
        out.append(
            OutRecord(
                topics.decisions,
                d.decision_value or wire.decision(decision),
                _key(decision.thread_id),
                headers=trace_headers(d.trace),
                source=d.source,
            )
        )
    for d in batch.decided:
        if d.dispatch is None:
            continue
        out.append(
            OutRecord(
                topics.dispatch(d.dispatch.agent),
                d.dispatch_value or wire.dispatch(d.dispatch, d.request),
                _key(d.dispatch.input.thread_id),
                headers=trace_headers(d.trace),
                source=d.source,
            )
        )
    for letter in batch.dead_letters:
        origin = (letter.source_topic, letter.partition, letter.offset)
        out.append(OutRecord(topics.deadletter, encode(letter), _key(letter.key), source=origin))
    for thread_id, state in batch.states.items():
        value = batch.encoded[thread_id] = batch.encoded.get(thread_id) or wire.state(state)
        out.append(OutRecord(topics.threads, value, thread_id.encode(), partition,
                             source=batch.changed_by.get(thread_id)))
    return out


def _key(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None
