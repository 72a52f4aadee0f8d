"""``FanOut.decided``: a cancel or replay for a run whose request this instance still awaits
a decision for waits for that decision (woken by it, not polling), and only then."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from services.consumer.metrics import ConsumerMetrics
from services.consumer.streams import FanOut
from services.kafka.clients import ConsumerRecord
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

KEY = ("t1", "r1")
LONG_S = 3600.0
"""Longer than any test: a wait that is not woken shows as a task not done."""


def fanout() -> FanOut:
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:9", topic_prefix="unit")
    return FanOut(kafka, ConsumerMetrics(), max_streams=4, stream_queue=16, index_size=16)


def decision(verdict: str) -> ConsumerRecord[bytes, bytes]:
    value = orjson.dumps({"requestId": "q1", "threadId": "t1", "runId": "r1",
                          "verdict": verdict})
    return ConsumerRecord("unit.decisions", 0, 7, 1_796_284_800_000, 0, b"t1", value, None,
                          len(b"t1"), len(value), [])


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_nothing_pending_answers_at_once() -> None:
    assert await fanout().decided(KEY, LONG_S) is False


async def test_a_pending_run_waits_until_its_admission_is_read() -> None:
    routes = fanout()
    waiter = routes.expect("q1", "t1", "r1")
    asking = asyncio.create_task(routes.decided(KEY, LONG_S))
    await turns()
    assert not asking.done()
    routes._on_decision(decision("admitted"))
    await turns()
    assert asking.done()
    assert asking.result() is True
    routes.forget(waiter)
    assert await routes.decided(KEY, LONG_S) is True


async def test_a_pending_run_refused_ends_the_wait_when_its_request_is_done() -> None:
    routes = fanout()
    waiter = routes.expect("q1", "t1", "r1")
    asking = asyncio.create_task(routes.decided(KEY, LONG_S))
    routes._on_decision(decision("rejected"))
    await turns()
    assert not asking.done()  # the POST handler has not let go of its request yet
    routes.forget(waiter)
    await turns()
    assert asking.done()
    assert asking.result() is False
    assert await routes.decided(KEY, LONG_S) is False  # nothing pending any more


async def test_the_wait_is_bounded() -> None:
    routes = fanout()
    routes.expect("q1", "t1", "r1")
    assert await routes.decided(KEY, 0.01) is False
