"""Records a consumer group never read because retention removed them first: an error, not a hole.

A group member reading from its committed offset (or from where it had
read to) while retention, or ``kafka-delete-records``, removed the records
there finds its fetch position below the partition's first offset. The
broker answers ``OFFSET_OUT_OF_RANGE``; aiokafka resets the position to the
earliest offset (``auto_offset_reset``) and logs it at INFO only. The
records between are gone unread: requests the gatekeeper never decided (a
client waiting on one gets ``504 decision_timeout``), dispatches a producer
worker never ran, notifications the notifier never sent, and nothing said
which.

``install`` (called by ``clients``) has aiokafka's fetcher remember, for a
consumer of a group (``watch``), the offset a fetch found out of range, and
once the reset has positioned the partition, log an ERROR naming the group,
topic, partition and the offsets lost, and count them
(``agui_records_lost_to_retention_total{group,topic}``). A reset that goes
back (a position past the end: a topic re-created) loses nothing and is
left as it was. Readers without a group seek where they choose and check
what they find themselves (a replay: ``services.consumer.replay``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.fetcher import Fetcher, OffsetResetStrategy

from services.kafka.wrapping import wrap_once
from services.runtime.metrics import records_lost

log = logging.getLogger(__name__)

_groups: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""A group member's subscription state → its group id."""
_pending: weakref.WeakKeyDictionary[Fetcher, dict[TopicPartition, int]] = (
    weakref.WeakKeyDictionary())
"""A fetcher → the offsets its fetches found out of range, until the reset positions them."""


def lost(fetch_offset: int, position: int) -> range | None:
    """The offsets skipped when a fetch at ``fetch_offset`` was reset to ``position``."""
    return range(fetch_offset, position) if position > fetch_offset else None


def watch(consumer: AIOKafkaConsumer, group_id: str) -> None:
    """Report the records ``consumer`` (a member of ``group_id``) loses to retention."""
    _groups[consumer._subscription] = group_id


def _out_of_range(fetch: Callable[..., Awaitable[bool]]) -> Callable[..., Awaitable[bool]]:
    async def proc_fetch_request(self: Fetcher, assignment: Any, node_id: int,
                                 request: Any) -> bool:
        woken = await fetch(self, assignment, node_id, request)
        if self._subscriptions not in _groups or not assignment.active:
            return woken
        for topic, partitions in request.topics:
            for partition, offset, *_ in partitions:
                tp = TopicPartition(topic, partition)
                state = assignment.state_value(tp)
                if (state is not None and state.awaiting_reset
                        and state.reset_strategy == OffsetResetStrategy.EARLIEST):
                    _pending.setdefault(self, {})[tp] = offset
        return woken

    return proc_fetch_request


def _repositioned(update: Callable[..., Awaitable[bool]]) -> Callable[..., Awaitable[bool]]:
    async def update_fetch_positions(self: Fetcher, assignment: Any, node_id: int,
                                     tps: Any) -> bool:
        woken = await update(self, assignment, node_id, tps)
        pending = _pending.get(self)
        if not pending:
            return woken
        group = _groups.get(self._subscriptions, "")
        for tp in [tp for tp in tps if tp in pending]:
            state = assignment.state_value(tp)
            if state is None or not state.has_valid_position:
                continue
            gone = lost(pending.pop(tp), state.position)
            if gone is not None:
                _report(group, tp, gone)
        return woken

    return update_fetch_positions


def _report(group: str, tp: TopicPartition, gone: range) -> None:
    log.error("group %s: %s partition %d offsets %d..%d (%d) were removed by retention "
              "before the group read them; reading goes on at %d. Those records are lost "
              "unread: never decided, run or notified",
              group, tp.topic, tp.partition, gone.start, gone.stop - 1, len(gone), gone.stop)
    records_lost(group, tp.topic, len(gone))


def install() -> None:
    """Have aiokafka's fetcher report a group's out-of-range reset past unread records."""
    wrap_once(Fetcher, "_proc_fetch_request", _out_of_range)
    wrap_once(Fetcher, "_update_fetch_positions", _repositioned)
