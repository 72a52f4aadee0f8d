"""What a resumed pipeline parent reads to continue its child thread.

Every resume of a parent whose child was interrupted rebuilds the child's messages
and state from ``events`` (``Delegation._history``). Found by probing: it held the
child's whole ``events`` partition in memory before filtering by key, every other
thread's records included (20,000 of 2 KB: 60 MB at peak), growing with retention.
"""

from __future__ import annotations

import tracemalloc
import uuid
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt, ResumeEntry

from contracts.headers import EVENT_TYPE, RUN_ID, SEQ
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_producer
from services.producer.delegation import CHILD_METADATA, Delegation
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

OTHER_RECORDS = 20_000
OTHER_BYTES = 2_000  # 40 MB of other threads' events on the child's partition


def child_events(thread: str, run: str) -> list[dict[str, object]]:
    return [
        {"type": "RUN_STARTED", "threadId": thread, "runId": run,
         "input": {"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
                   "forwardedProps": {}, "messages": [
                       {"id": "u1", "role": "user", "content": "review the report"}]}},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Ready once signed off."},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        {"type": "RUN_FINISHED", "threadId": thread, "runId": run, "outcome": {
            "type": "interrupt", "interrupts": [{"id": "sign-off", "reason": "sign_off"}]}},
    ]


async def write(settings: KafkaSettings, child_thread: str, child_run: str) -> None:
    """The child's run, then 20,000 records of other threads on its partition."""
    producer = new_producer(settings, "child-history")
    filler = "x" * OTHER_BYTES
    marks = [(RUN_ID, b"r"), (EVENT_TYPE, b"TEXT_MESSAGE_CONTENT")]

    async def others(count: int) -> None:
        for i in range(count):
            event = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": filler}
            await producer.send(settings.topics.events, orjson.dumps(event),
                                key=f"other-{i % 50}".encode(),
                                headers=[*marks, (SEQ, str(i).encode())])
    await producer.start()
    try:
        for seq, event in enumerate(child_events(child_thread, child_run), 1):
            await producer.send(settings.topics.events, orjson.dumps(event),
                                key=child_thread.encode(),
                                headers=[(RUN_ID, child_run.encode()),
                                         (EVENT_TYPE, str(event["type"]).encode()),
                                         (SEQ, str(seq).encode())])
        await others(OTHER_RECORDS)
        await producer.flush()
    finally:
        await producer.stop()


def resumed(parent_thread: str, named: dict[str, Any]) -> Delegation:
    carried = Interrupt(id="review/sign-off", reason="sign_off",
                        metadata={CHILD_METADATA: named})
    ctx = SimpleNamespace(  # what Delegation reads of a RunContext
        thread_id=parent_thread, run_id="r2", request_id="req-2", principal="tenant-a",
        prior_interrupts={carried.id: carried},
        answers={carried.id: ResumeEntry(interrupt_id=carried.id, status="resolved",
                                         payload={"approved": True})})
    return Delegation(ctx, KafkaSettings())  # type: ignore[arg-type]


async def test_a_parent_resume_holds_the_childs_records_not_the_partitions(
        kafka_bootstrap: str, topic_prefix: str) -> None:
    # Fetches of 1 MiB (the floor): the reader holds a few of them at peak (the batch
    # being filtered, the response it came from, the next one arriving), ~5 MB here.
    # With the default 2 MiB fetches that was 7 MB, and 8.4 MB once on a busy CI machine.
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                             partitions=1, max_record_bytes=262_144)
    await ensure_topics(settings, ("pipeline_child",))
    parent_thread = f"t-{uuid.uuid4().hex[:8]}"
    child_thread = f"{parent_thread}/review-0123456789abcdef"
    await write(settings, child_thread, "r1/review-00000000")
    delegation = resumed(parent_thread, {"agent": "pipeline_child", "threadId": child_thread,
                                         "runId": "r1/review-00000000",
                                         "interruptId": "sign-off"})
    delegation.settings = settings
    tracemalloc.start()
    try:
        request = await delegation.request("pipeline_child", "review")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert request.input.thread_id == child_thread
    assert [m.id for m in request.input.messages][:1] == ["u1"]  # the child's history
    assert peak < 8e6, (f"continuing a child thread of 5 events held {peak / 1e6:.1f} MB "
                        f"at peak: the {OTHER_RECORDS * OTHER_BYTES / 1e6:.0f} MB of other "
                        "threads' events on its partition")
