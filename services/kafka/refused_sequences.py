"""A batch the broker refused for its size gives its sequence numbers back.

An idempotent producer numbers each partition's records (the broker keeps
the last number it wrote and takes only the next one). aiokafka 0.14
numbers a batch when it sends it and never takes the numbers back: when
the broker refuses the batch for its size (``MessageSizeTooLargeError``,
``RecordListTooLargeError``: a topic's ``max.message.bytes`` lowered below
a record), it stored nothing, yet the producer's next batch for that
partition starts past the refused one, and the broker answers
``OutOfOrderSequenceNumber`` — to that batch and every later one, for the
producer's life. One oversized event then cut every run of its partition
off ``events``, its RUN_ERROR included. The Java client takes the numbers
back for a batch that failed without being written
(``adjustSequencesDueToFailedBatch``).

``install`` (called by ``clients``) has aiokafka's produce handler do the
same once a response is handled: a batch failed for its size gives its
numbers back. It is the partition's only batch in flight (aiokafka sends
one batch per partition at a time), so the next batch takes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiokafka.producer.sender import SendProduceReqHandler

from services.kafka.size_refusals import TOO_LARGE
from services.kafka.wrapping import wrap_once

_Handle = Callable[[SendProduceReqHandler, Any], None]
_WRAP = 2**32


def rewound(sequence: int, count: int) -> int:
    """``sequence`` moved back by ``count``, within the int32 aiokafka wraps it to."""
    back = sequence - count
    return back + _WRAP if back < -(2**31) else back


def give_back(numbers: dict[Any, int], batches: dict[Any, Any]) -> None:
    """Take back (in ``numbers``, the producer's next sequence number per partition) the
    numbers of every batch in ``batches`` the broker refused for its size."""
    for tp, batch in batches.items():
        future = batch.future
        if not future.done() or future.cancelled():
            continue
        if isinstance(future.exception(), TOO_LARGE):
            numbers[tp] = rewound(numbers[tp], batch.record_count)


def _giving_back(handle: _Handle) -> _Handle:
    def handle_response(self: SendProduceReqHandler, response: Any) -> None:
        handle(self, response)
        txn_manager = self._sender._txn_manager
        if txn_manager is not None:
            give_back(txn_manager._sequence_numbers, self._batches)

    return handle_response


def install() -> None:
    """Have aiokafka's idempotent producers reuse the numbers of a batch refused for size."""
    wrap_once(SendProduceReqHandler, "handle_response", _giving_back)
