"""Read-process-write transactions: outputs and consumed offsets commit together.

``commit_outputs`` is the one place a transaction is run for a consume →
produce loop: begin, send every output record without waiting for each,
add the consumed offsets **once** (aiokafka #1098: repeated
``send_offsets_to_transaction`` calls in one transaction have raised
KeyError), wait until the broker has acknowledged every record, commit.

Records are written through aiokafka's batch API (``create_batch`` /
``send_batch``), one batch per topic partition, instead of one ``send`` per
record: ``send`` awaits metadata, partitions, and creates and later resolves
a future for every record, which cost more than the gatekeeper's decision
itself. Partitions are chosen exactly as ``send`` chooses them (aiokafka's
``DefaultPartitioner``: murmur2 of the key over all partitions, a random one
for no key), so a key lands where any other aiokafka producer would put it.

The wait is not optional: aiokafka, unlike the Java client, does not make a
transaction abortable when one of its record batches fails (a record the
broker refuses, say, as too large); ``commit_transaction`` then succeeds and
commits the other records with the consumed offsets, half a transaction.
Anything failing before the commit aborts the transaction (best effort) and
re-raises, so the caller rewinds to its last committed offsets. When
``commit_transaction`` itself raises, the outcome is unknown (the broker may
have committed); the caller must learn it from Kafka once a new producer with
the same transactional id has settled the transaction. ``is_fenced`` tells a
zombie (another producer took the transactional id) from an error worth
retrying.

A record the broker refuses for its size (``MessageSizeTooLargeError``,
``RecordListTooLargeError``: never retried) fails its record batch, and so
the transaction; retried as it is, it would fail forever. So the failure
is raised as ``RecordsRefusedError`` naming the records of the refused
batches (each ``OutRecord`` carries the ``source`` its writer gave it), so
the caller can set aside what made them instead of retrying the same. The
transaction is aborted as for any other failure.

A transaction that hangs (a request the broker never answers, as once
seen right after a broker restart) must not hold every partition it carries
forever: with ``deadline_s`` it fails as ``TransactionStalledError`` when it has not
ended in time, without an abort (the producer is to be replaced: the new
producer's ``init_transactions`` ends it, and the caller settles it like a
failed commit).

``group_id`` may be a ``fencing.FencedGroup``: the offsets then commit with
the member's group generation (KIP-447), and a member the group has moved
past cannot commit at all. With a plain group id, aiokafka sends
TxnOffsetCommit v0 (no generation), and only a transactional id derived from
the input partition a producer owns fences the last owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.partitioner import DefaultPartitioner

from services.kafka.clients import AIOKafkaProducer, TopicPartition
from services.kafka.size_refusals import TOO_LARGE

__all__ = [
    "OutRecord",
    "RecordsRefusedError",
    "TransactionStalledError",
    "commit_outputs",
    "is_fenced",
    "shorten_commit_gap_backoff",
    "stop_producer",
]

log = logging.getLogger(__name__)

PARTITIONER = DefaultPartitioner()
"""How ``send`` chooses a partition for a key, for a producer that names none of its own
(the relay's place a thread among AGUI_PARTITIONS: ``partitioning.ThreadPartitioner``)."""


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record a transaction writes (``partition`` None: the key's partition)."""

    topic: str
    value: bytes
    key: bytes | None = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes]] | None = None
    source: Hashable = None
    """What the writer made this record from (named again when the broker refuses it)."""


class TransactionStalledError(Exception):
    """The transaction did not end by its deadline: its outcome is unknown."""


class RecordsRefusedError(KafkaError):  # type: ignore[misc]
    """The broker refused record batches of the transaction as too large; it was aborted."""

    def __init__(self, records: Sequence[OutRecord], cause: BaseException) -> None:
        super().__init__(f"the broker refused {len(records)} record(s) as too large ({cause!r})")
        self.records = tuple(records)
        """Every record of the refused batches."""


async def commit_outputs(
    producer: AIOKafkaProducer,
    records: Sequence[OutRecord],
    offsets: Mapping[TopicPartition, int],
    group_id: str,
    *,
    deadline_s: float | None = None,
) -> dict[TopicPartition, int]:
    """Write ``records`` and commit ``offsets`` (next offsets to read) atomically.

    Returns, for each topic partition written, the offset after its last record (a
    changelog's owner checkpoints its local state at it).
    """
    step = ["beginning"]
    deadline = asyncio.timeout(deadline_s)
    try:
        async with deadline:
            return await _transact(producer, records, offsets, group_id, step)
    except TimeoutError as exc:
        if not deadline.expired():  # a timeout of the client's own, not the deadline
            raise
        raise TransactionStalledError(
            f"the transaction did not end within {deadline_s:g} s (stuck {step[0]})"
        ) from exc


async def _transact(
    producer: AIOKafkaProducer,
    records: Sequence[OutRecord],
    offsets: Mapping[TopicPartition, int],
    group_id: str,
    step: list[str],
) -> dict[TopicPartition, int]:
    """``commit_outputs`` itself; ``step`` names what it waits for, for the stall message."""
    await producer.begin_transaction()
    sent: list[asyncio.Future[Any]] = []
    try:
        step[0] = "sending records"
        batches = await _send_batched(producer, records)
        sent = [future for future, _ in batches]
        if offsets:
            step[0] = "adding the offsets"
            await producer.send_offsets_to_transaction(dict(offsets), group_id)
        step[0] = "waiting for the records' acknowledgements"
        written = await _delivered(batches)
        step[0] = "committing"
        await producer.commit_transaction()
        return written
    except BaseException as exc:
        for future in sent:  # their failures are this one: none is left unretrieved
            future.add_done_callback(_retrieve)
        _retrieve_transaction_failure(producer)
        fenced = _fenced_by(producer)
        if fenced is not None and not isinstance(exc, ProducerFenced):
            raise fenced from exc  # surfaced as whatever call came next, e.g. IllegalOperation
        if not isinstance(exc, asyncio.CancelledError):  # stalled: the next producer ends it
            await _abort(producer)
        raise


Sent = list[tuple[asyncio.Future[Any], list[OutRecord]]]
"""Each record batch's delivery future, with the records it holds."""


async def _send_batched(producer: AIOKafkaProducer, records: Sequence[OutRecord]) -> Sent:
    """Queue ``records`` in one batch per topic partition (more when one fills up)."""
    partitions: dict[str, list[int]] = {}
    batches: dict[tuple[str, int], tuple[Any, list[OutRecord]]] = {}
    sent: Sent = []
    for r in records:
        partition = r.partition
        if partition is None:
            if r.topic not in partitions:
                partitions[r.topic] = sorted(await producer.partitions_for(r.topic))
            every = partitions[r.topic]
            partition = getattr(producer, "_partitioner", PARTITIONER)(r.key, every, every)
        where = (r.topic, partition)
        if where not in batches:
            batches[where] = (producer.create_batch(), [])
        batch, held = batches[where]
        headers = list(r.headers) if r.headers else []
        if batch.append(timestamp=None, key=r.key, value=r.value, headers=headers) is None:
            sent.append((await producer.send_batch(batch, r.topic, partition=partition), held))
            batch, held = batches[where] = (producer.create_batch(), [])
            batch.append(timestamp=None, key=r.key, value=r.value, headers=headers)
        held.append(r)
    for (topic, partition), (batch, held) in batches.items():
        sent.append((await producer.send_batch(batch, topic, partition=partition), held))
    return sent


def _retrieve_transaction_failure(producer: AIOKafkaProducer) -> None:
    """Mark aiokafka's internal futures that carry the transaction's failure as seen.

    When its sender fails (a fenced producer), aiokafka sets the failure on
    the "transaction ended" future and on every queued batch's drain waiter,
    and nothing awaits them after a failed commit: unseen, each is logged as
    "never retrieved" when collected, from whatever code the collector
    happens to interrupt. Reached through aiokafka internals.
    """
    waiters = [getattr(getattr(producer, "_txn_manager", None), "_transaction_waiter", None)]
    accumulator = getattr(producer, "_message_accumulator", None)
    for queue in getattr(accumulator, "_batches", {}).values():
        waiters.extend(getattr(batch, "_drain_waiter", None) for batch in queue)
    for batch in getattr(accumulator, "_pending_batches", ()):
        waiters.append(getattr(batch, "_drain_waiter", None))
    for waiter in waiters:
        if isinstance(waiter, asyncio.Future):
            waiter.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _delivered(sent: Sent) -> dict[TopicPartition, int]:
    """Wait for every record's acknowledgement; raise the first failure (nothing commits).

    Returns the offset after the last record of each topic partition (a record batch's
    metadata carries its first offset; its records follow it one by one).

    Batches refused as too large are raised together, as ``RecordsRefusedError``.
    """
    results = await asyncio.gather(*(future for future, _ in sent), return_exceptions=True)
    refused = [(result, held) for result, (_, held) in zip(results, sent, strict=True)
               if isinstance(result, TOO_LARGE)]
    if refused:
        raise RecordsRefusedError([r for _, held in refused for r in held],
                                  refused[0][0]) from refused[0][0]
    for result in results:
        if isinstance(result, BaseException):
            raise result
    after: dict[TopicPartition, int] = {}
    for result, (_, held) in zip(results, sent, strict=True):
        meta: Any = result  # RecordMetadata: every failure was raised above
        tp = TopicPartition(meta.topic, meta.partition)
        after[tp] = max(after.get(tp, 0), meta.offset + len(held))
    return after


async def _abort(producer: AIOKafkaProducer) -> None:
    """Abort the open transaction, if the producer still can; never raise."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.abort_transaction(), timeout=10)
        return
    log.debug("abort_transaction failed; the next init_transactions will abort it")


async def stop_producer(producer: AIOKafkaProducer, timeout_s: float = 5.0) -> None:
    """Stop a producer that may be stuck; never raise, never wait past ``timeout_s``.

    aiokafka's ``stop`` first waits for every queued batch to be delivered,
    which never happens when the broker stopped answering; past the timeout
    its sender task is cancelled and its connections are closed. Reached
    through aiokafka internals.
    """
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.stop(), timeout_s)
        return
    sender = getattr(getattr(producer, "_sender", None), "sender_task", None)
    if isinstance(sender, asyncio.Task):
        sender.cancel()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.client.close(), timeout_s)
    log.warning("a producer did not stop within %g s; its connections were closed", timeout_s)


def shorten_commit_gap_backoff(seconds: float = 0.002) -> None:
    """Retry a transaction that begins right after a commit every ``seconds``, not 20 ms.

    After ``commit_transaction`` returns, the broker still writes the commit
    markers (1-2 ms on this machine); a transaction that starts at once gets
    ``CONCURRENT_TRANSACTIONS`` on its first AddPartitionsToTxn, and aiokafka
    then waits a hard-coded 20 ms (``BACKOFF_OVERRIDE``, after KAFKA-5477)
    before retrying. A loop that commits continuously pays those 20 ms on
    every transaction: measured 22.5 ms for the first send of a transaction
    begun at once, 1.4 ms when begun 2 ms later. Process-wide; call it once
    from a service that runs back-to-back transactions.
    """
    from aiokafka.producer import sender

    if hasattr(sender, "BACKOFF_OVERRIDE"):
        sender.BACKOFF_OVERRIDE = seconds


def is_fenced(exc: BaseException) -> bool:
    """True when another producer with the same transactional id took over."""
    return isinstance(exc, ProducerFenced)


def _fenced_by(producer: AIOKafkaProducer) -> ProducerFenced | None:
    """The ``ProducerFenced`` that stopped ``producer``'s sender, if that is what happened.

    aiokafka raises it inside its background sender task, which then fails
    the transaction; the caller's next call may only see "not in
    transaction". The task is reached through aiokafka internals.
    """
    task = getattr(getattr(producer, "_sender", None), "sender_task", None)
    if task is None or not task.done() or task.cancelled():
        return None
    error = task.exception()
    return error if isinstance(error, ProducerFenced) else None
