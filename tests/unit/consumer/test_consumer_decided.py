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


def decision(verdict: str, thread: str = "t1", run: str = "r1") -> ConsumerRecord[bytes, bytes]:
    value = orjson.dumps({"requestId": "q1", "threadId": thread, "runId": run,
                          "verdict": verdict, "message": verdict,
                          "decidedAt": "2026-12-01T00:00:00Z"})
    return ConsumerRecord("unit.decisions", 0, 7, 1_796_284_800_000, 0, thread.encode(),
                          value, None, len(thread), len(value), [])


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


async def test_one_request_id_on_two_threads_is_two_requests_each_told_its_own() -> None:
    """A client chooses its request id (``agui-request-id``): the same one on two threads
    at once must reach each thread's waiter, not the last registered."""
    routes = fanout()
    one, two = routes.expect("q1", "t1", "r1"), routes.expect("q1", "t2", "r2")
    routes._on_decision(decision("admitted", "t2", "r2"))
    routes._on_decision(decision("rejected", "t1", "r1"))
    assert [(d.thread_id, d.verdict) for d in (await one.next(1), await two.next(1))] == [
        ("t1", "rejected"), ("t2", "admitted")]
    again = routes.expect("q1", "t1", "r1")  # the same request twice at once: both told
    routes._on_decision(decision("admitted"))
    assert [(await w.next(1)).verdict for w in (one, again)] == ["admitted", "admitted"]
    for waiter in (one, two, again, one):
        routes.forget(waiter)
    assert routes._waiters == {}
