"""A batch refused for its size gives its sequence numbers back (aiokafka kept them).

Without it, an idempotent producer's next batch to the partition starts past the
refused one and the broker answers ``OutOfOrderSequenceNumber`` to it and every later
one (the integration test ``test_producer_broker_refusals`` shows it through a broker).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, RecordListTooLargeError
from aiokafka.producer.sender import SendProduceReqHandler

from services.kafka import refused_sequences
from services.kafka.refused_sequences import give_back, rewound
from services.kafka.wrapping import mark_of

pytestmark = pytest.mark.unit


@dataclass
class Batch:
    record_count: int
    future: asyncio.Future[object] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


async def test_only_batches_refused_for_their_size_give_their_numbers_back() -> None:
    refused, listed, sent, failed, waiting = (Batch(3), Batch(2), Batch(4), Batch(5),
                                              Batch(6))
    refused.future.set_exception(MessageSizeTooLargeError())
    listed.future.set_exception(RecordListTooLargeError())
    sent.future.set_result(object())
    failed.future.set_exception(KafkaTimeoutError())
    numbers = {"a": 10, "b": 20, "c": 30, "d": 40, "e": 50}
    give_back(numbers, {"a": refused, "b": listed, "c": sent, "d": failed, "e": waiting})
    assert numbers == {"a": 7, "b": 18, "c": 30, "d": 40, "e": 50}


def test_a_number_moved_back_stays_an_int32_as_aiokafka_wraps_it() -> None:
    assert rewound(10, 3) == 7
    assert rewound(-(2**31) + 1, 3) == 2**31 - 2


def test_install_wraps_the_produce_handler_once() -> None:
    refused_sequences.install()
    wrapped = SendProduceReqHandler.handle_response
    refused_sequences.install()
    assert SendProduceReqHandler.handle_response is wrapped
    assert getattr(wrapped, mark_of(refused_sequences._giving_back), False)
