"""A run's records the broker cannot take for now: the run holds and sends them again, in order.

A fake producer fails chosen attempts of chosen records (``LeaderNotAvailableError``
as when a whole cluster comes back, the delivery timeout, the sequence gap a failed
batch leaves, a full buffer) and keeps what it took, per topic, in order.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    OutOfOrderSequenceNumber,
    TopicAuthorizationFailedError,
)

from contracts.headers import SEQ, header_value
from services.producer.execution import KafkaRunSink
from services.producer.publish import Destination, RunWriter
from services.producer.redelivery import RecordsLostError
from services.producer.sink import EventRecord, RunReport
from services.producer.sizes import RecordGuard

pytestmark = pytest.mark.unit


class FlakyProducer:
    """Acknowledges every record at once, except the attempts ``failing`` names:
    ``{(topic, seq): [error of the first attempt, of the second, ...]}``; an error
    given as ``("enqueue", exc)`` is raised by ``send`` itself (nothing taken), one
    given as ``("later", exc)`` fails the record after the next ones were taken."""

    def __init__(self, failing: dict[tuple[str, int], list[Any]]) -> None:
        self.failing = {k: list(v) for k, v in failing.items()}
        self.taken: list[tuple[str, int]] = []
        self.attempts: list[tuple[str, int]] = []
        self._txn_manager = None

    async def send(self, topic: str, value: bytes, *, key: bytes, partition: int | None,
                   headers: list[tuple[str, bytes]]) -> asyncio.Future[Any]:
        seq = int(header_value(headers, SEQ) or -1)
        self.attempts.append((topic, seq))
        errors = self.failing.get((topic, seq)) or []
        error = errors.pop(0) if errors else None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if isinstance(error, tuple) and error[0] == "enqueue":
            raise error[1]
        if isinstance(error, tuple):  # ("later", exc): fails once the next records are taken
            asyncio.get_running_loop().call_soon(future.set_exception, error[1])
            return future
        if error is None:
            self.taken.append((topic, seq))
            future.set_result(None)
        else:
            future.set_exception(error)
        return future


def _sink(producer: FlakyProducer) -> KafkaRunSink:
    writer = RunWriter(producer, "events", "t1", "r1", "scripted",  # type: ignore[arg-type]
                       guard=RecordGuard.of(1_048_576), boundaries=Destination("runs"))
    return KafkaRunSink(writer)


def _record(seq: int, event_type: str = "TEXT_MESSAGE_CONTENT") -> EventRecord:
    return EventRecord(seq, b'{"type":"%s"}' % event_type.encode(), event_type)


async def _run(sink: KafkaRunSink, events: int) -> None:
    """RUN_STARTED, ``events`` more records, then RUN_FINISHED."""
    await sink.send(_record(0, "RUN_STARTED"))
    for seq in range(1, events + 1):
        await sink.send(_record(seq))
    end = _record(events + 1, "RUN_FINISHED")
    await sink.send_terminal(end, RunReport("success", end, (), events + 2))


def _written(producer: FlakyProducer, topic: str) -> list[int]:
    """The sequence numbers ``topic`` holds once copies are dropped, in log order."""
    seen: list[int] = []
    for t, seq in producer.taken:
        if t == topic and seq not in seen:
            seen.append(seq)
    return seen


async def test_a_record_the_broker_could_not_take_is_sent_again_in_order() -> None:
    producer = FlakyProducer({
        ("events", 2): [LeaderNotAvailableError()],
        ("events", 3): [OutOfOrderSequenceNumber()],  # behind the gap #2's batch left
    })
    await _run(_sink(producer), 4)
    assert _written(producer, "events") == [0, 1, 2, 3, 4, 5], "no gap, no reordering"
    assert _written(producer, "runs") == [0, 5]
    assert producer.attempts.count(("events", 2)) == 2


async def test_the_end_holds_until_runs_takes_it_and_only_then_goes_to_events() -> None:
    producer = FlakyProducer({("runs", 2): [LeaderNotAvailableError(), KafkaTimeoutError()]})
    await _run(_sink(producer), 1)
    end_attempts = [a for a in producer.attempts if a[1] == 2]
    assert end_attempts == [("runs", 2)] * 3 + [("events", 2)], \
        "the end goes to events only once runs has it"
    assert _written(producer, "events") == [0, 1, 2]


async def test_a_record_the_producer_could_not_even_buffer_is_sent_again() -> None:
    producer = FlakyProducer({("events", 1): [("enqueue", KafkaTimeoutError())]})
    await _run(_sink(producer), 2)
    assert _written(producer, "events") == [0, 1, 2, 3]
    assert [seq for t, seq in producer.attempts if t == "events"][:3] == [0, 1, 1], \
        "the record is taken before the next one is offered"


async def test_a_record_written_past_a_failed_one_ends_the_run() -> None:
    """#2 failed after #3 and #4 were written (a batch expired while no leader was known,
    the next one written once a leader was): #2 cannot come before #3 any more, and a
    live stream would skip it, so the run ends instead of writing it late."""
    producer = FlakyProducer({("events", 2): [("later", LeaderNotAvailableError())]})
    with pytest.raises(RecordsLostError, match=r"took record #3 of the run after #2 failed"):
        await _run(_sink(producer), 6)
    assert producer.attempts.count(("events", 2)) == 1, "never written out of order"


async def test_a_refusal_is_raised_not_sent_again() -> None:
    producer = FlakyProducer({("events", 1): [TopicAuthorizationFailedError()]})
    with pytest.raises(TopicAuthorizationFailedError):
        await _run(_sink(producer), 2)
    assert producer.attempts.count(("events", 1)) == 1


@pytest.mark.parametrize(("error", "expected"), [
    (LeaderNotAvailableError(), True), (KafkaTimeoutError(), True),
    (OutOfOrderSequenceNumber(), True), (TopicAuthorizationFailedError(), False),
    (KafkaError(), False), (ValueError(), False)])
def test_which_failures_hold_the_run(error: BaseException, expected: bool) -> None:
    from services.producer.redelivery import retriable

    assert retriable(error) is expected
