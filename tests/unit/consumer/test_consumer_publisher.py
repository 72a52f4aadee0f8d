"""The publisher's bound on a broker that takes a record and never acknowledges it.

With the broker down a POST had no answer for minutes (found by probing): the send
waited outside the decision timeout. A send not acknowledged within the publisher's
``ack_timeout_s`` fails as a ``KafkaError``, which the routes answer ``503
broker_unavailable``. The broker's side is not what is tested here (a producer that
never answers stands in for it): the fault suites stop real brokers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.consumer.publisher import NotAcknowledgedError, Publisher
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit


class Unanswered:
    """A producer whose sends are never acknowledged."""

    def __init__(self) -> None:
        self.sent = 0

    async def send_and_wait(self, *_: Any, **__: Any) -> None:
        self.sent += 1
        await asyncio.Event().wait()


async def test_a_send_the_broker_never_acknowledges_fails_as_a_kafka_error() -> None:
    publisher = Publisher(KafkaSettings(), ack_timeout_s=0.05)
    producer = Unanswered()
    publisher._producer = producer  # type: ignore[assignment]
    with pytest.raises(NotAcknowledgedError, match=r"did not acknowledge it within 0\.05 s"):
        await publisher.send_request("t1", b"{}")
    assert producer.sent == 1
