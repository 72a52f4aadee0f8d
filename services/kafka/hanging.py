"""Transactions a partition never saw end ("hanging"), closed the way their coordinator decided.

A transaction ends when its coordinator writes a marker to every partition
it touched. Kafka 4.4's coordinator, when a broker restarts with a
transaction pending (or aborts one that timed out meanwhile), can complete it
before that broker's own partitions have a leader endpoint, and then skips
their markers as "likely deleted already". Such a partition keeps the
transaction open: its last stable offset stays below the transaction's
records and every ``read_committed`` reader waits, until the same producer
id writes a marker there again. Kafka's remedy (KIP-664) is an operator
running ``kafka-transactions.sh abort``, which aborts whatever it finds,
even a transaction its coordinator committed.

A service that restores from a changelog only it writes and waits for the
changelog's partitions to close would wait forever: it is the producer
that closes them. So it asks the coordinator, before its producer's
``init_transactions`` (which forgets), how its transactional id's last
transaction ended (``DescribeTransactions``, KIP-664: ``last_transaction``),
and when one of its partitions is still open once that producer has
started, it runs one transaction over those partitions with no records,
ended the same way (``close_hanging``): the marker closes the hanging
transaction as decided. A marker on a partition with nothing open for the
producer id is a no-op; another producer's open transaction is untouched.

The outcome is the id's *last* transaction's, so this is exact when the
hanging one is the last (a coordinator that skipped the markers of a
transaction it completed on load, then fenced the producer; a later
transaction of the same id touching the partition would have closed it).

The same holds for the group's offsets: an offset commit whose marker was
skipped keeps them unstable, and the next owner's stable fetch would wait
for ever; the marker-only transaction can span the group's offsets
partition too.

aiokafka speaks no ``DescribeTransactions``, so it is declared here on
aiokafka's protocol types, and the marker-only transaction names its
partitions and group to aiokafka's transaction manager and sender, which
have no public call for either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaError, for_code
from aiokafka.producer.sender import AddOffsetsToTxnHandler
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from services.kafka.clients import AIOKafkaProducer, TopicPartition

__all__ = ["LastTransaction", "close_hanging", "last_transaction"]

log = logging.getLogger(__name__)

TRANSACTIONAL_ID_NOT_FOUND = 105
TRIES = 10
RETRY_S = 0.3
"""A coordinator still loading (a broker just started) is asked again, for about 3 s."""
ADD_GROUP_LIMIT_S = 30.0
"""How long the group's offsets are asked to join a closing transaction before giving up."""
COMMITTED = frozenset({"CompleteCommit", "PrepareCommit"})
"""States whose transaction is, or is about to be, committed."""
ABORTED = frozenset({"CompleteAbort", "PrepareAbort", "PrepareEpochFence", "Ongoing"})
"""States whose transaction is aborted, or will be by the next ``init_transactions``."""


@dataclass(frozen=True, slots=True)
class LastTransaction:
    """What a transactional id's coordinator says of its last transaction."""

    transactional_id: str
    state: str
    """As the coordinator names it (``CompleteCommit``, ``Ongoing``, ``Empty`` ...)."""
    producer_id: int
    producer_epoch: int

    @property
    def committed(self) -> bool | None:
        """True committed, False aborted, None when the state says neither (``Empty``)."""
        if self.state in COMMITTED:
            return True
        if self.state in ABORTED:
            return False
        return None


async def last_transaction(client: AIOKafkaClient, transactional_id: str) -> LastTransaction | None:
    """The coordinator's account of ``transactional_id``; None when it has none.

    ``client`` is any started aiokafka client (a consumer's ``_client``).
    Errors are logged and answered None: this only informs a repair.
    """
    for attempt in range(1, TRIES + 1):
        try:
            return await _describe(client, transactional_id)
        except KafkaError as exc:
            if not exc.retriable or attempt == TRIES:
                log.warning("could not describe transactional id %s: %s", transactional_id,
                            exc)
                return None
            await asyncio.sleep(RETRY_S)
    return None


async def _describe(client: AIOKafkaClient, transactional_id: str) -> LastTransaction | None:
    node = await client.coordinator_lookup(CoordinationType.TRANSACTION, transactional_id)
    response = await client.send(node, DescribeTransactionsRequest([transactional_id]))
    for code, txn_id, state, _timeout, _start, producer_id, epoch, _topics, _ in (
            response.transaction_states):
        if txn_id != transactional_id or code == TRANSACTIONAL_ID_NOT_FOUND:
            continue
        if code:
            raise for_code(code)()
        return LastTransaction(txn_id, state, producer_id, epoch)
    return None


async def close_hanging(
    producer: AIOKafkaProducer,
    partitions: Iterable[TopicPartition],
    *,
    commit: bool,
    group_id: str | None = None,
) -> None:
    """One transaction over ``partitions`` with no records, committed or aborted.

    With ``group_id`` the transaction also spans that group's partition of
    the offsets topic (``AddOffsetsToTxn`` and no offsets): an offset commit
    the broker left pending holds the group's offsets unstable just as
    records hold a partition. ``producer`` is started, transactional and not
    in a transaction.
    """
    manager = producer._txn_manager
    await producer.begin_transaction()
    try:
        for tp in partitions:
            manager.maybe_add_partition_to_txn(tp)
        if group_id is not None:
            await _add_group(producer, group_id)
    except BaseException:
        with contextlib.suppress(KafkaError):
            await producer.abort_transaction()
        raise
    if commit:
        await producer.commit_transaction()
    else:
        await producer.abort_transaction()


async def _add_group(producer: AIOKafkaProducer, group_id: str) -> None:
    """The group's offsets partition joins the open transaction (``AddOffsetsToTxn``).

    aiokafka's handler answers one attempt: False when the coordinator
    moved, is loading, or still completes the previous transaction
    (``CONCURRENT_TRANSACTIONS``, usual right after one), after its
    backoff. Taken once, such an answer left the group out and the commit
    closed the partitions but not the offsets, which stayed unstable until
    the takeover gave up on them. So it is asked again, the coordinator
    found anew each time, until it joins or ``ADD_GROUP_LIMIT_S`` passed.
    """
    manager, sender = producer._txn_manager, producer._sender
    deadline = asyncio.get_running_loop().time() + ADD_GROUP_LIMIT_S
    while True:
        node = await sender._find_coordinator(CoordinationType.TRANSACTION,
                                              manager.transactional_id)
        if await AddOffsetsToTxnHandler(sender, group_id).do(node):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise KafkaError(f"the offsets of group {group_id} could not join the "
                             f"transaction within {ADD_GROUP_LIMIT_S:.0f} s")


# -- the request, on aiokafka's protocol types ---------------------------------


class DescribeTransactionsResponse_v0(Response):  # type: ignore[misc]  # noqa: N801
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "transaction_states",
            CompactArray(
                ("error_code", Int16),
                ("transactional_id", CompactString("utf-8")),
                ("transaction_state", CompactString("utf-8")),
                ("transaction_timeout_ms", Int32),
                ("transaction_start_time_ms", Int64),
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                (
                    "topics",
                    CompactArray(
                        ("topic", CompactString("utf-8")),
                        ("partitions", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest(Request[DescribeTransactionsRequest_v0]):  # type: ignore[misc]
    """``DescribeTransactions`` (KIP-664): a transactional id's state at its coordinator."""

    API_KEY: ClassVar[int] = 65

    def __init__(self, transactional_ids: list[str]) -> None:
        self._fields: tuple[Any, ...] = (transactional_ids, {})

    def build(
        self, request_struct_class: type[DescribeTransactionsRequest_v0]
    ) -> DescribeTransactionsRequest_v0:
        return request_struct_class(*self._fields)
