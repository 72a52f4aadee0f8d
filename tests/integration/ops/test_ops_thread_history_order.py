"""A thread's history read with records carrying odd headers, or out of time order.

``thread_log`` drops resent copies by the run-id and sequence headers before it
parses a record. When it kept only each run's highest number (found by
probing), a record on ``events`` under the thread's key that is no event at all
(not JSON) but carries a live run's ``agui-run-id`` and a high ``agui-seq``
hid every real event of the run after it, and a worker's clock stepping back
(the batch sorted by timestamp) hid the events it reordered. The consumer
service skips such a record before it is sequenced, so the client saw the run
whole; ``threads show``, ``audit``, ``resume`` and the inbox's history route
lost the run's end and the transcript its messages.
"""

from __future__ import annotations

import uuid

import pytest
from ops_support import Writer, run_cli

from contracts import EventHeaders
from services.kafka.thread_log import BOUNDARIES, read_thread
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def poisoned_run(writer: Writer, thread: str, run: str) -> None:
    await writer.event(thread, run, {"type": "RUN_STARTED", "threadId": thread, "runId": run,
                                     "input": {"threadId": thread, "runId": run,
                                               "messages": []}})
    # another writer's record under the thread's key: not an event, a live run's headers
    await writer.send(writer.topics.events, thread, b"\xff not an event",
                      EventHeaders(run, "TEXT_MESSAGE_CONTENT", "scripted", 1_000).encode())
    mid = f"{run}-m"
    await writer.event(thread, run, {"type": "TEXT_MESSAGE_START", "messageId": mid,
                                     "role": "assistant"})
    await writer.event(thread, run, {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid,
                                     "delta": "the answer"})
    await writer.event(thread, run, {"type": "TEXT_MESSAGE_END", "messageId": mid})
    await writer.event(thread, run, {"type": "RUN_FINISHED", "threadId": thread, "runId": run})


async def test_a_non_event_with_a_runs_headers_hides_nothing_of_the_run(
        writer: Writer, ops_settings: KafkaSettings) -> None:
    thread, run = f"t-odd-{uuid.uuid4().hex[:6]}", "r-odd-1"
    await poisoned_run(writer, thread, run)
    found = await read_thread(ops_settings, thread, event_types=BOUNDARIES)
    kinds = [r.value.get("type") for r in found.events if isinstance(r.value, dict)]
    assert kinds == ["RUN_STARTED", "RUN_FINISHED"], kinds


async def test_threads_show_gives_the_runs_outcome_past_a_non_event_with_its_headers(
        writer: Writer, ops_settings: KafkaSettings) -> None:
    thread, run = f"t-odd-{uuid.uuid4().hex[:6]}", "r-odd-2"
    await poisoned_run(writer, thread, run)
    shown = await run_cli(ops_settings, "threads", "show", thread, "--json")
    assert shown.code == 0, shown.stderr
    (doc,) = shown.json_lines()
    assert [r.get("outcome") for r in doc["runs"]] == ["success"], doc["runs"]


async def test_a_worker_clock_stepping_back_loses_no_message_of_the_transcript(
        writer: Writer, ops_settings: KafkaSettings) -> None:
    """A batch is sorted by record timestamp before it is deduplicated: a run whose
    worker's clock stepped back 15 ms mid-run has its later events sorted before its
    earlier ones, and with one number remembered per run the earlier ones are then taken
    for copies and dropped: the transcript (what ``resume`` sends, what the inbox's
    history route shows) loses the assistant's message."""
    from services.agui.transcript import Replayer

    thread, run = f"t-clock-{uuid.uuid4().hex[:6]}", "r-clock-1"
    t0 = 1_796_000_000_000
    mid = f"{run}-m"
    await writer.event(thread, run, {"type": "RUN_STARTED", "threadId": thread, "runId": run,
                                     "input": {"threadId": thread, "runId": run,
                                               "messages": []}}, timestamp_ms=t0)
    await writer.event(thread, run, {"type": "TEXT_MESSAGE_START", "messageId": mid,
                                     "role": "assistant"}, timestamp_ms=t0 + 10)
    await writer.event(thread, run, {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid,
                                     "delta": "the answer"}, timestamp_ms=t0 + 20)
    # the clock steps back 15 ms
    await writer.event(thread, run, {"type": "TEXT_MESSAGE_END", "messageId": mid},
                       timestamp_ms=t0 + 5)
    await writer.event(thread, run, {"type": "RUN_FINISHED", "threadId": thread, "runId": run},
                       timestamp_ms=t0 + 6)
    replayer = Replayer()
    await read_thread(ops_settings, thread, event_types=BOUNDARIES, fold=lambda batch:
                      replayer.feed(e.value for e in batch if isinstance(e.value, dict)))
    messages = replayer.done().messages
    assert [m.get("content") for m in messages if m.get("role") == "assistant"] == [
        "the answer"], messages
