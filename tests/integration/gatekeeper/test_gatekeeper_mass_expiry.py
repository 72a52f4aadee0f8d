"""Many threads lapsing at the same instant (``AGUI_ON_EXPIRY=cancel``).

10,000 interrupts given one deadline (a TTL applied to a batch of runs, a
campaign of approvals) lapse together. The expirer handled the lapsed
threads one at a time and, for each, read the thread's events partition
from its run's admission (less a minute) to the end: every other thread's
events of that window were read again for every thread. On a live relay
(8 partitions, 10,000 threads of one small run each) it cancelled about 6
threads a second, so the last would have been cancelled ~27 minutes after
its deadline (found by probing). What is read per lapse must not grow with
the number of threads lapsing beside it: one read of a partition's window
serves every thread of it that is due.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt
from gatekeeper_harness import Topics

from contracts import EventHeaders, OpenInterrupt, RunRequest, ThreadState, decode
from services.gatekeeper import expirer as expirer_module
from services.gatekeeper.expirer import Expirer
from services.gatekeeper.expiry_policy import request_id_for
from services.kafka.clients import TopicPartition
from services.kafka.reader import TopicReader
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 150
PARTITIONS = (0, 1)
EVENTS_PER_RUN = 5


def _events(thread: str, n: int) -> list[dict[str, Any]]:
    run, call = f"run-{n}", f"call-{n}"
    return [{"type": "RUN_STARTED", "threadId": thread, "runId": run,
             "input": {"threadId": thread, "runId": run, "tools": [], "context": [],
                       "state": {}, "forwardedProps": {},
                       "messages": [{"id": "m1", "role": "user", "content": "Clean up"}]}},
            {"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": "delete_files"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": '{"paths":["/tmp/a"]}'},
            {"type": "TOOL_CALL_END", "toolCallId": call},
            {"type": "RUN_FINISHED", "threadId": thread, "runId": run,
             "outcome": {"type": "interrupt", "interrupts": [{"id": f"approve-{n}"}]}}]


class CountingReader(TopicReader):
    """The expirer's reader, counting every record it reads."""

    records_read = 0

    async def batches(self, **kwargs: Any) -> AsyncGenerator[list[Any], None]:
        async for batch in super().batches(**kwargs):
            CountingReader.records_read += len(batch)
            yield batch


async def test_threads_lapsing_together_are_resumed_from_one_read_of_each_partition(
        kafka: KafkaSettings, topics: Topics, monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime.now(UTC)
    states: dict[str, ThreadState] = {}
    where: dict[str, int] = {}
    producer = topics._producer
    for n in range(THREADS):
        thread, partition = f"lapse-{n:04d}", PARTITIONS[n % len(PARTITIONS)]
        where[thread] = partition
        for seq, event in enumerate(_events(thread, n)):
            await producer.send(kafka.topics.events, orjson.dumps(event), key=thread.encode(),
                                partition=partition,
                                headers=EventHeaders(f"run-{n}", event["type"], "approval",
                                                     seq).encode())
        states[thread] = ThreadState(
            thread_id=thread, status="interrupted", agent="approval", principal="ta",
            run_id=f"run-{n}", interrupted_run_id=f"run-{n}", recent_run_ids=[f"run-{n}"],
            updated_at=now, run_started_at=now - timedelta(seconds=1),
            open_interrupts=[OpenInterrupt(run_id=f"run-{n}", interrupt=Interrupt(
                id=f"approve-{n}", reason="tool_approval", tool_call_id=f"call-{n}",
                expires_at=(now - timedelta(seconds=1)).isoformat()))])
    await producer.flush()
    written = THREADS * EVENTS_PER_RUN

    monkeypatch.setattr(expirer_module, "TopicReader", CountingReader)
    CountingReader.records_read = 0
    expirer = Expirer(kafka, "mass-expiry", lambda: datetime.now(UTC),
                      lambda p, thread: states[thread] if where.get(thread) == p else None)
    for partition in PARTITIONS:  # every thread lapsed at the same instant
        expirer.restored(partition, [s for t, s in states.items() if where[t] == partition])
    stop = asyncio.Event()
    started = time.perf_counter()
    task = asyncio.create_task(expirer.run(stop))
    try:
        async with asyncio.timeout(180):
            while expirer.sent < THREADS:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    elapsed = time.perf_counter() - started
    print(f"{THREADS} lapsed threads: resumes sent in {elapsed:.1f} s; "
          f"{CountingReader.records_read} event records read for {written} written")
    # one read of each partition's window for the threads due together, not one per thread
    assert CountingReader.records_read <= 2 * written, (
        f"the expirer read {CountingReader.records_read} records to cancel {THREADS} threads "
        f"whose events are {written} records: the partition's window once per thread")

    async with TopicReader(kafka, "mass-expiry-check") as reader:
        records = await reader.read_all([TopicPartition(kafka.topics.requests, p)
                                         for p in PARTITIONS])
    sent = {r.key.decode(): (r.partition, decode(RunRequest, r.value)) for r in records}
    assert sorted(sent) == sorted(states)  # each thread's resume, once, on its partition
    for thread, (partition, request) in sent.items():
        n = int(thread.removeprefix("lapse-"))
        assert partition == where[thread]
        assert request.request_id == request_id_for(f"run-{n}")
        assert [(e.interrupt_id, e.status) for e in request.input.resume or ()] == [
            (f"approve-{n}", "cancelled")]
        # the thread's own history only: its user message and its tool call, no other's
        user, assistant = (m.model_dump(by_alias=True, exclude_none=True)
                           for m in request.input.messages)
        assert user["content"] == "Clean up"
        assert [c["id"] for c in assistant["toolCalls"]] == [f"call-{n}"]


async def test_a_thread_that_cannot_be_resumed_leaves_the_others_of_its_batch_sent(
        kafka: KafkaSettings, topics: Topics, caplog: pytest.LogCaptureFixture) -> None:
    """Per thread as before: a resume too large for a record is given up (an error, once),
    one that cannot be built is tried again, and neither holds back the threads due with
    them."""
    now = datetime.now(UTC)
    small = kafka.model_copy(update={"max_record_bytes": 4096})
    producer = topics._producer
    states: dict[str, ThreadState] = {}
    for n, thread in enumerate(("fine", "too-large", "no-agent")):
        for seq, event in enumerate(_events(thread, n)):
            if thread == "too-large" and event["type"] == "RUN_STARTED":
                event["input"]["messages"][0]["content"] = "x" * 8000
            await producer.send(kafka.topics.events, orjson.dumps(event), key=thread.encode(),
                                partition=0, headers=EventHeaders(f"run-{n}", event["type"],
                                                                  "approval", seq).encode())
        states[thread] = ThreadState(
            thread_id=thread, status="interrupted", principal="ta",
            agent=None if thread == "no-agent" else "approval",
            run_id=f"run-{n}", interrupted_run_id=f"run-{n}", recent_run_ids=[f"run-{n}"],
            updated_at=now, run_started_at=now - timedelta(seconds=1),
            open_interrupts=[OpenInterrupt(run_id=f"run-{n}", interrupt=Interrupt(
                id=f"approve-{n}", reason="input",
                expires_at=(now - timedelta(seconds=1)).isoformat()))])
    await producer.flush()

    expirer = Expirer(small, "mass-expiry-faults", lambda: datetime.now(UTC),
                      lambda _p, thread: states.get(thread))
    expirer.restored(0, states.values())
    stop = asyncio.Event()
    task = asyncio.create_task(expirer.run(stop))

    def logged(thread: str, text: str) -> int:
        return sum(thread in r.getMessage() and text in r.getMessage() for r in caplog.records)

    try:
        async with asyncio.timeout(30):
            while expirer.sent < 1 or logged("no-agent", "trying again") < 2:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert expirer.sent == 1
    assert logged("too-large", "cannot be sent") == 1  # not tried again
    async with TopicReader(kafka, "mass-expiry-faults-check") as reader:
        records = await reader.read_all([TopicPartition(kafka.topics.requests, 0)])
    assert [r.key for r in records] == [b"fine"]
