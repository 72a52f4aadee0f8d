"""A cancel names a run by (threadId, runId); a worker finds it by both.

AG-UI run ids are unique per thread only (the README's tour uses ``r1`` on every thread,
and the consumer service keys everything by ``(threadId, runId)``). A producer worker
kept its runs in progress (``AgentHost.active``) and the cancels that came before their
dispatch (``CancelMemo``) by ``runId`` alone. In a 30-minute soak (every thread's first
run named ``r1``; 1 cancel/s of a thread's running ``r1``) the worker logged "ignored
cancel of run r1: not running on this worker" for 551 of 778 cancels while the run was
running there (another thread's ``r1``, dispatched later, had replaced it in ``active``),
and then "run r1 was cancelled before it started" 540 times: the next ``r1`` dispatched
on *another* thread (an approval nobody cancelled) ended ``RUN_FINISHED cancelled``.
The cancel was lost for the run it named and landed on a bystander.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import orjson
import pytest
from producer_harness import Relay, first_input, in_process_worker

from contracts import EventHeaders
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

RUN = "r1"


def terminal(relay: Relay, thread_id: str, run_id: str) -> dict | None:
    """The run's terminal event on ``events`` (the relay keys its views by runId only)."""
    for record in relay.order:
        headers = EventHeaders.decode(record.headers)
        if (record.key == thread_id.encode() and headers is not None
                and headers.run_id == run_id
                and headers.event_type in ("RUN_FINISHED", "RUN_ERROR")):
            return orjson.loads(record.value)
    return None


def started(relay: Relay, thread_id: str, run_id: str) -> bool:
    return any(record.key == thread_id.encode()
               and (h := EventHeaders.decode(record.headers)) is not None
               and h.run_id == run_id for record in relay.order)


async def wait_for(check, what: str, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_cancel_stops_the_run_it_names_and_no_other_threads_run(
        kafka: KafkaSettings, relay: Relay) -> None:
    named, other, bystander = (f"{p}-{uuid.uuid4().hex[:8]}" for p in ("a", "b", "c"))
    async with in_process_worker(kafka):
        for thread in (named, other):  # two threads' runs, both called r1, both running
            await relay.dispatch("scripted", first_input(thread, RUN, script={
                "text": "working", "delayMs": 8_000}))
            await wait_for(lambda t=thread: started(relay, t, RUN), f"{thread} started", 15)
        await relay.cancel(named, RUN)  # the client cancels thread a's r1
        await asyncio.sleep(1.0)
        # a new thread's first run, also r1: nobody cancelled it
        await relay.dispatch("scripted", first_input(bystander, RUN, script={"text": "ok"}))
        await wait_for(lambda: terminal(relay, bystander, RUN) is not None,
                       "the bystander's run ended", 15)
        await wait_for(lambda: terminal(relay, named, RUN) is not None,
                       "the cancelled run ended", 15)
        ends = {t: terminal(relay, t, RUN)["outcome"]["type"] for t in (named, bystander)}
    assert ends == {named: "cancelled", bystander: "success"}, (
        f"thread {named}'s r1 was cancelled: it ended {ends[named]!r}; thread "
        f"{bystander}'s r1, never cancelled, ended {ends[bystander]!r}")
