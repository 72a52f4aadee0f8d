"""No record wedges a gatekeeper partition: poison inputs on the real broker (issue 13).

Each poison is written straight onto ``requests`` or ``runs``, as a
client past the consumer service's edge (or an older version) could:

- a request whose 400,000-character threadId is its key and its
  ``input.threadId`` (the record is under 1 MiB; the decision and thread
  state it used to make were not);
- a request with 300-character ids;
- a request keyed ``x`` whose threadId is 600,000 characters: its decision
  (keyed by the threadId, quoting it) cannot fit any record;
- a ``RUN_FINISHED`` with 50 interrupts making the thread state over 1 MiB.

After each, other threads on the same partition are still decided, the
poison is rejected or dead-lettered with its reason, and a restarted
gatekeeper decides on without failing a transaction. The broker's own
refusal, the belt and braces behind the gatekeeper's measurements, is
reached by letting the gatekeeper believe in a 4 MiB limit: the inputs of
the refused records are dead-lettered and the partition goes on; with that
set-aside disabled the partition really wedges, and ``/readyz`` names it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import Interrupt, RunFinishedEvent, RunFinishedInterruptOutcome
from gatekeeper_harness import GatekeeperProcess, Topics, run_request

from contracts import EventHeaders, encode, encode_event
from deploy.kafka.probe import free_port
from services.gatekeeper import wire
from services.gatekeeper.processor import Processor
from services.gatekeeper.thread import Boundary, apply_boundary, fresh
from services.kafka.sizing import record_size
from services.kafka.transactions import PARTITIONER
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

MIB = 1_048_576
PARTITIONS = list(range(4))


def partition_of(key: str) -> int:
    return int(PARTITIONER(key.encode(), PARTITIONS, PARTITIONS))


def neighbours(key: str, n: int, prefix: str) -> list[str]:
    """``n`` thread ids on the same partition as ``key``."""
    target = partition_of(key)
    found = (f"{prefix}-{i}" for i in range(10_000))
    return [t for t in found if partition_of(t) == target][:n]


async def all_decided(topics: Topics, threads: list[str], tag: str) -> None:
    """A fresh run on each of ``threads`` is admitted (however long the partition took)."""
    requests = [run_request(f"{t}-{tag}", t, f"{t}-{tag}-run") for t in threads]
    await topics.requests(requests)
    await topics.until(lambda: all(r.request_id in topics.decisions for r in requests),
                       within=90, what=f"decisions on the poison's partition ({tag})")
    assert {topics.decisions[r.request_id][0].verdict for r in requests} == {"admitted"}


def raw_request(request_id: str, thread_id: str, run_id: str) -> bytes:
    return encode(run_request(request_id, thread_id, run_id))


def interrupting(thread_id: str, run_id: str, message_chars: int) -> RunFinishedEvent:
    interrupts = [Interrupt(id=f"i{n}", reason="approve", message="m" * message_chars)
                  for n in range(50)]
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id,
                            outcome=RunFinishedInterruptOutcome(interrupts=interrupts))


async def health(port: int) -> tuple[int, Any]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        response = await client.get("/readyz")
        return response.status_code, response.json()


async def test_poison_requests_and_boundaries_are_refused_and_the_partition_decides_on(
    kafka: KafkaSettings, topics: Topics, processes: Callable[..., GatekeeperProcess]
) -> None:
    port = free_port()
    gatekeeper = processes(kafka, AGUI_HEALTH_PORT=str(port))
    gatekeeper.start()
    await gatekeeper.ready()

    # (a) a 400,000-character threadId, key and input alike: rejected, its decision fits
    huge = "h" * 400_000
    value = raw_request("q-huge", huge, "r1")
    assert len(value) < MIB
    await topics.raw_request(value, huge)
    decision = await topics.decision("q-huge", within=60)
    assert (decision.verdict, decision.code) == ("rejected", "invalid_input")
    assert "input/threadId is 400000 characters long" in decision.message
    await all_decided(topics, neighbours(huge, 3, "a"), "a")

    # (b) 300-character ids
    long_id = "l" * 300
    await topics.raw_request(raw_request("q-long", long_id, "r" * 300), long_id)
    decision = await topics.decision("q-long", within=60)
    assert (decision.verdict, decision.code) == ("rejected", "invalid_input")
    assert "AGUI_MAX_ID_LENGTH" in decision.message
    assert "l" * 300 not in topics.threads, "a refused request changes no thread"
    await all_decided(topics, neighbours(long_id, 3, "b"), "b")

    # (a') a decision no record can hold: the request is dead-lettered, nothing decided
    vast = "v" * 600_000
    await topics.raw_request(raw_request("q-vast", vast, "r1"), "x")
    await topics.until(lambda: any(d.code == "record_too_large" and d.key == "x"
                                   for d in topics.dead_letters), within=60,
                       what="the dead letter of the request whose decision cannot fit")
    [letter] = [d for d in topics.dead_letters if d.key == "x"]
    assert letter.source_topic == kafka.topics.requests
    assert "decision would be a" in letter.reason
    assert "q-vast" not in topics.decisions
    await all_decided(topics, neighbours("x", 3, "c"), "c")

    # (c) a RUN_FINISHED whose 50 interrupts make the thread state over 1 MiB
    thread, run_id = neighbours("x", 1, "interrupted")[0], "run-" + "u" * 240
    assert (await topics.decide(run_request("q-int", thread, run_id))).verdict == "admitted"
    await topics.started(thread, run_id)
    event = interrupting(thread, run_id, 20_750)
    headers = EventHeaders(run_id, "RUN_FINISHED", "scripted", 1).encode()
    assert record_size(thread.encode(), encode_event(event), headers) < MIB, "the broker takes it"
    running = apply_boundary(fresh(thread), Boundary("RUN_STARTED", run_id, "scripted"))
    closed = apply_boundary(running, Boundary("RUN_FINISHED", run_id, "scripted", event.outcome))
    assert len(wire.state(closed)) > MIB, "the state it would make would not fit"
    await topics.finished(thread, run_id, *event.outcome.interrupts)  # type: ignore[union-attr]
    await topics.until(lambda: any(d.code == "record_too_large"
                                   and d.source_topic == kafka.topics.runs
                                   for d in topics.dead_letters), within=60,
                       what="the dead letter of the oversized boundary")
    [boundary] = [d for d in topics.dead_letters if d.source_topic == kafka.topics.runs]
    assert "the thread's state would be a" in boundary.reason
    assert "recorded as failed" in boundary.reason
    await topics.until(lambda: getattr(topics.threads.get(thread), "status", "") == "idle",
                       within=30,
                       what="the thread closed as failed")
    after = await topics.decide(run_request("q-after", thread, "r-after"), within=60)
    assert after.verdict == "admitted", "the thread is free again"
    await all_decided(topics, neighbours("x", 3, "d"), "d")
    status, _ = await health(port)
    assert status == 200

    # a restart reads on from the committed offsets: nothing is decided twice, and no
    # transaction ever failed (none was even tried with a record too large)
    letters = len(topics.dead_letters)
    assert gatekeeper.terminate() == 0
    gatekeeper.start()
    await gatekeeper.ready()
    for key, tag in ((huge, "e"), (long_id, "f"), ("x", "g")):
        await all_decided(topics, neighbours(key, 2, tag), tag)
    assert len(topics.dead_letters) == letters
    assert [len(topics.decisions[q]) for q in ("q-huge", "q-long")] == [1, 1]
    failed = [line for line in gatekeeper.log_lines(since_start=False)
              if str(line.get("msg", "")).startswith("transaction on partitions")]
    assert failed == [], failed
    status, body = await health(port)
    assert (status, body["ready"]) == (200, True)


async def test_records_the_broker_refuses_are_dead_lettered_and_the_partition_moves_on(
    kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any]
) -> None:
    """The gatekeeper believes in 4 MiB records; the broker takes 1 MiB: its refusal decides."""
    processor: Processor = await in_process(kafka.model_copy(update={"max_record_bytes": 4 * MIB}))
    vast = "v" * 600_000
    await topics.raw_request(raw_request("q-vast", vast, "r1"), "x")
    await topics.until(lambda: any(d.key == "x" for d in topics.dead_letters), within=90,
                       what="the dead letter of the request whose decision the broker refused")
    [letter] = [d for d in topics.dead_letters if d.key == "x"]
    assert (letter.code, letter.source_topic) == ("record_too_large", kafka.topics.requests)
    assert "refused by the broker as too large" in letter.reason
    assert "q-vast" not in topics.decisions
    await all_decided(topics, neighbours("x", 3, "n"), "n")
    assert processor.stats["transactions_failed"] >= 1
    assert processor.ready


async def test_a_wedged_partition_makes_readiness_fail_naming_it(
    kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the set-aside, the broker's refusal wedges the partition: /readyz says which."""
    monkeypatch.setattr("services.gatekeeper.commit.set_aside", lambda *_: [])
    processor: Processor = await in_process(
        kafka.model_copy(update={"max_record_bytes": 4 * MIB}), AGUI_GATEKEEPER_STALL_S=2
    )
    await all_decided(topics, neighbours("x", 2, "w"), "before")
    assert processor.ready, "green while every partition decides"
    await topics.raw_request(raw_request("q-vast", "v" * 600_000, "r1"), "x")
    deadline = time.monotonic() + 60
    while processor.ready:
        assert time.monotonic() < deadline, "readiness never turned red on a wedged partition"
        await asyncio.sleep(0.2)
    assert list(processor.failing) == [f"partition-{partition_of('x')}"]
    assert "committed offsets unchanged" in processor.failing[f"partition-{partition_of('x')}"]
    assert orjson.dumps(processor.failing)
