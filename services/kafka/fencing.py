"""Group-generation fencing for read-process-write transactions (KIP-447), on aiokafka.

A consume → produce loop that commits its consumed offsets in its
transactions must never let two owners of an input partition both commit.
Before KIP-447 the only fence was the transactional id: each input partition
needed its own producer, so the next owner's ``init_transactions`` fenced the
last, and a loop over n partitions ran n transactions. KIP-447 fences by the
consumer group instead, so one producer can carry every partition an
instance owns:

- ``TxnOffsetCommit`` v3 carries the member's group generation; the group
  coordinator refuses offsets from a generation that is over, so a zombie's
  transaction cannot commit and is aborted.
- ``OffsetFetch`` v7 with ``require_stable`` answers ``UNSTABLE_OFFSET_COMMIT``
  while a transaction holding offsets for a partition is still open, so the
  next owner starts from what that transaction finally did.
- With static membership (KIP-345, a ``group_instance_id``), a restarted
  process takes its predecessor's place at once instead of after the session
  timeout; the predecessor, if it still runs, is refused with
  ``FENCED_INSTANCE_ID`` (``InstanceFencedError``), and a static member
  leaves with ``LeaveGroup`` v3 naming its instance (``leave_group``): aiokafka
  sends no leave for one, so its partitions would wait out the session.

aiokafka 0.14 speaks none of these (it sends ``TxnOffsetCommit`` v0,
``OffsetFetch`` up to v3 and ``LeaveGroup`` up to v1), so the requests are
declared here on aiokafka's own protocol types, and the producer's
offset-commit handler sends v3 when the group id it is given is a
``FencedGroup`` (a ``str`` that carries the member). The consumer's
coordinator is reached through aiokafka internals (``_coordinator``): it has
no public API for any of them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from aiokafka.consumer.group_coordinator import BaseCoordinator
from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    IllegalGenerationError,
    KafkaError,
    NotCoordinatorForGroupError,
    UnknownMemberIdError,
    for_code,
)
from aiokafka.producer import sender
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Array,
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
)

from services.kafka.clients import AIOKafkaConsumer, TopicPartition

__all__ = [
    "FencedGroup",
    "InstanceFencedError",
    "Member",
    "StaleGenerationError",
    "fenced_group",
    "is_member",
    "leave_group",
    "request_rejoin",
    "stable_committed",
]

log = logging.getLogger(__name__)

UNSTABLE_OFFSET_COMMIT = 88
FENCED_INSTANCE_ID = 82
STALE_MEMBER = {IllegalGenerationError.errno, UnknownMemberIdError.errno, FENCED_INSTANCE_ID}
STABLE_POLL_S = 0.02
"""How often a fetch waiting for an open transaction's offsets asks again."""
HANGING_AFTER_S = 2.0
"""How long offsets stay unstable before ``stable_committed``'s ``hanging`` is asked."""


class StaleGenerationError(KafkaError):  # type: ignore[misc]
    """The group moved on: this member's offsets were refused, its transaction aborts."""

    retriable = False


class InstanceFencedError(StaleGenerationError):
    """Another process joined the group under this member's group instance id.

    Not a rebalance: two running processes share one static identity, and
    each join takes the partitions from the other. The Kafka clients treat
    it as fatal, and so does a service that sees it.
    """


@dataclass(frozen=True, slots=True)
class Member:
    """Who commits: the group, this member's id and the generation it joined."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


class FencedGroup(str):
    """A group id that carries the committing member (aiokafka passes it through as is)."""

    member: Member

    def __new__(cls, member: Member) -> FencedGroup:
        group = super().__new__(cls, member.group_id)
        group.member = member
        return group


def fenced_group(consumer: AIOKafkaConsumer) -> FencedGroup:
    """The group id to commit with, fenced by ``consumer``'s current generation.

    Raises when the consumer is not a member now: the broker does not check
    generation -1 with no member id, so such offsets would not be fenced.
    """
    coordinator = _coordinator(consumer)
    if coordinator.generation < 0 or not coordinator.member_id:
        raise StaleGenerationError(f"not a member of group {coordinator.group_id!r} now")
    return FencedGroup(
        Member(
            coordinator.group_id,
            coordinator.member_id,
            coordinator.generation,
            getattr(coordinator, "_group_instance_id", None),
        )
    )


def is_member(consumer: AIOKafkaConsumer, group: FencedGroup) -> bool:
    """True while ``consumer`` is still the member, of the generation, ``group`` names."""
    coordinator = _coordinator(consumer)
    member = group.member
    return (coordinator.member_id, coordinator.generation) == (
        member.member_id,
        member.generation_id,
    )


async def leave_group(consumer: AIOKafkaConsumer) -> bool:
    """Leave the group now, as a static member; False when ``consumer`` is not one.

    Call it right before ``consumer.stop()``, once nothing more is committed:
    a static member's partitions otherwise stay with it until its session
    times out. The member id is sent with the instance id, so a process that
    has already been replaced by a newer one does not remove its successor.
    """
    coordinator = _coordinator(consumer)
    instance = getattr(coordinator, "_group_instance_id", None)
    if instance is None or coordinator.generation < 0 or not coordinator.member_id:
        return False
    request = StaticLeaveGroupRequest(coordinator.group_id, coordinator.member_id, instance)
    try:
        response = await coordinator._send_req(request)
    except KafkaError as exc:
        log.warning("leaving group %r as %r failed: %s", coordinator.group_id, instance, exc)
        return False
    codes = [response.error_code, *(code for _m, _i, code in response.members)]
    if any(codes):
        log.warning(
            "leaving group %r as %r refused: %s",
            coordinator.group_id,
            instance,
            [for_code(c).__name__ for c in codes if c],
        )
        return False
    coordinator.reset_generation()  # close() sends nothing more; a heartbeat meanwhile is moot
    return True


def request_rejoin(consumer: AIOKafkaConsumer) -> None:
    """Have ``consumer`` join its group again (its offsets were refused: it is not a member)."""
    _coordinator(consumer).request_rejoin()


async def stable_committed(
    consumer: AIOKafkaConsumer,
    partitions: list[TopicPartition],
    *,
    timeout_s: float = 120.0,
    hanging: Callable[[], Awaitable[None]] | None = None,
) -> dict[TopicPartition, int | None]:
    """The group's committed offsets of ``partitions`` once no open transaction holds any.

    None for a partition the group has no offset for. Waits while the
    coordinator answers ``UNSTABLE_OFFSET_COMMIT`` (a transaction with
    offsets for one of them is still open: it commits, aborts, or times out).
    ``hanging`` is awaited once after ``HANGING_AFTER_S`` of that: the
    committer's own transaction may be one the broker left open
    (``services.kafka.hanging``).
    """
    coordinator = _coordinator(consumer)
    topics: dict[str, list[int]] = collections.defaultdict(list)
    for tp in partitions:
        topics[tp.topic].append(tp.partition)
    request = StableOffsetFetchRequest(coordinator.group_id, sorted(topics.items()))
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        if hanging is not None and time.monotonic() - started > HANGING_AFTER_S:
            await hanging()
            hanging = None
        await coordinator.ensure_coordinator_known()
        try:
            response = await coordinator._send_req(request)  # marks the coordinator dead on a
            found = _stable_offsets(response)  # connection error, so it is looked up again
        except (GroupLoadInProgressError, GroupCoordinatorNotAvailableError, _UnstableError):
            pass
        except NotCoordinatorForGroupError:
            coordinator.coordinator_dead()
        except KafkaError as exc:
            if not exc.retriable:
                raise
        else:
            return found
        if time.monotonic() > deadline:
            raise KafkaError(f"committed offsets of {partitions} unstable after {timeout_s} s")
        await asyncio.sleep(STABLE_POLL_S)


class _UnstableError(Exception):
    """An open transaction still holds offsets for a partition asked for."""


def _stable_offsets(response: Any) -> dict[TopicPartition, int | None]:
    if response.error_code:
        raise _error(response.error_code)
    found: dict[TopicPartition, int | None] = {}
    for topic, rows, _tags in response.topics:
        for partition, offset, _epoch, _metadata, error_code, _ in rows:
            if error_code == UNSTABLE_OFFSET_COMMIT:
                raise _UnstableError(f"{topic}[{partition}]")
            if error_code:
                raise _error(error_code)
            found[TopicPartition(topic, partition)] = offset if offset >= 0 else None
    return found


def _error(code: int) -> KafkaError:
    return for_code(code)()


def _coordinator(consumer: AIOKafkaConsumer) -> BaseCoordinator:
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or not hasattr(coordinator, "generation"):
        raise RuntimeError("fencing needs a started consumer in a group (group_id set)")
    return coordinator


# -- the two requests, on aiokafka's protocol types ---------------------------


class TxnOffsetCommitResponse_v3(Response):  # type: ignore[misc]  # noqa: N801
    API_KEY = 28
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "errors",
            CompactArray(
                ("topic", CompactString("utf-8")),
                (
                    "partition_errors",
                    CompactArray(
                        ("partition", Int32), ("error_code", Int16), ("tags", TaggedFields)
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitRequest_v3(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 28
    API_VERSION = 3
    RESPONSE_TYPE = TxnOffsetCommitResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("group_id", CompactString("utf-8")),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", CompactString("utf-8")),
        ("group_instance_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class FencedTxnOffsetCommitRequest(Request[TxnOffsetCommitRequest_v3]):  # type: ignore[misc]
    """``TxnOffsetCommit`` with the member's generation (v3, the first version with it)."""

    API_KEY: ClassVar[int] = 28

    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        member: Member,
        topics: list[tuple[str, list[tuple[int, int, str]]]],
    ) -> None:
        self._fields: tuple[Any, ...] = (
            transactional_id,
            member.group_id,
            producer_id,
            producer_epoch,
            member.generation_id,
            member.member_id,
            member.group_instance_id,
            [
                (name, [(p, offset, -1, metadata, {}) for p, offset, metadata in rows], {})
                for name, rows in topics
            ],
            {},
        )

    def build(
        self, request_struct_class: type[TxnOffsetCommitRequest_v3]
    ) -> TxnOffsetCommitRequest_v3:
        return request_struct_class(*self._fields)


class OffsetFetchResponse_v7(Response):  # type: ignore[misc]  # noqa: N801
    API_KEY = 9
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("metadata", CompactString("utf-8")),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class OffsetFetchRequest_v7(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class StableOffsetFetchRequest(Request[OffsetFetchRequest_v7]):  # type: ignore[misc]
    """``OffsetFetch`` with ``require_stable`` (v7, the first version with it)."""

    API_KEY: ClassVar[int] = 9

    def __init__(self, group_id: str, topics: list[tuple[str, list[int]]]) -> None:
        self._fields: tuple[Any, ...] = (
            group_id,
            [(name, sorted(ps), {}) for name, ps in topics],
            True,
            {},
        )

    def build(self, request_struct_class: type[OffsetFetchRequest_v7]) -> OffsetFetchRequest_v7:
        return request_struct_class(*self._fields)


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]  # noqa: N801
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]  # noqa: N801
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class StaticLeaveGroupRequest(Request[LeaveGroupRequest_v3]):  # type: ignore[misc]
    """``LeaveGroup`` naming members by instance id (v3, the first version with it)."""

    API_KEY: ClassVar[int] = 13

    def __init__(self, group_id: str, member_id: str, group_instance_id: str) -> None:
        self._fields: tuple[Any, ...] = (group_id, [(member_id, group_instance_id)])

    def build(self, request_struct_class: type[LeaveGroupRequest_v3]) -> LeaveGroupRequest_v3:
        return request_struct_class(*self._fields)


# -- aiokafka's offset-commit handler, taught v3 ------------------------------

_Handler = sender.TxnOffsetCommitHandler
_create_request = _Handler.create_request
_handle_response = _Handler.handle_response


@dataclass(frozen=True, slots=True)
class _AsV0:
    """A v3 response seen as v0 (no tags), for aiokafka's own error handling."""

    errors: list[tuple[str, list[tuple[int, int]]]]


def _fenced_create_request(self: Any) -> Any:
    group = self._group_id
    if not isinstance(group, FencedGroup):
        return _create_request(self)
    txn = self._sender._txn_manager
    topics: dict[str, list[tuple[int, int, str]]] = collections.defaultdict(list)
    for tp, meta in sorted(self._offsets.items()):
        topics[tp.topic].append((tp.partition, meta.offset, meta.metadata))
    return FencedTxnOffsetCommitRequest(
        txn.transactional_id,
        txn.producer_id,
        txn.producer_epoch,
        group.member,
        list(topics.items()),
    )


def _fenced_handle_response(self: Any, response: Any) -> Any:
    if not isinstance(response, TxnOffsetCommitResponse_v3):
        return _handle_response(self, response)
    stale = sorted(
        f"{topic}[{partition}]"
        for topic, rows, _ in response.errors
        for partition, code, _ in rows
        if code in STALE_MEMBER
    )
    if stale:
        member = self._group_id.member
        txn = self._sender._txn_manager
        fenced_instance = any(
            code == FENCED_INSTANCE_ID for _t, rows, _ in response.errors for _p, code, _ in rows
        )
        # error_transaction forgets what the transaction touched, and aiokafka then takes
        # it for empty and ends it locally without EndTxn(ABORT): the broker would keep it
        # open (its records pinning the last stable offset) until it times out, and the
        # producer's next commit would commit them. Keep them, so the abort is sent.
        touched, group = set(txn._txn_partitions), txn._txn_consumer_group
        txn.error_transaction(
            InstanceFencedError(
                f"group {member.group_id!r} refused offsets of {', '.join(stale)}: another "
                f"process joined it as group instance {member.group_instance_id!r}; each "
                "instance id must be used by one process at a time"
            )
            if fenced_instance
            else StaleGenerationError(
                f"group {member.group_id!r} refused offsets of {', '.join(stale)} from member "
                f"{member.member_id!r} of generation {member.generation_id}: the group moved on"
            )
        )
        txn._txn_partitions.update(touched)
        txn._txn_consumer_group = group
        txn._transaction_waiter.exception()  # the offsets' future reports it; no "never retrieved"
        return None
    rows_v0 = [(topic, [(p, code) for p, code, _ in rows]) for topic, rows, _ in response.errors]
    view = _AsV0(rows_v0)
    return _handle_response(self, view)


_Handler.create_request = _fenced_create_request
_Handler.handle_response = _fenced_handle_response
