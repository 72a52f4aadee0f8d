"""The gatekeeper reads run boundaries, never tokens: ``requests`` and ``runs`` only.

Two gatekeepers and a real producer worker (in this process) serve runs that
stream 200 ``TEXT_MESSAGE_CONTENT`` events each and end with an interrupt,
on threads covering every partition; each interrupt is then answered and
the resumed run admitted — the gatekeepers learned every end from ``runs``.
Counting what each gatekeeper's consumer read, per topic, and what it was
assigned: nothing of ``events``, and of ``runs`` exactly its boundary
records (a run's ``RUN_STARTED`` and end). The group commits no offset of
``events`` either.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from ag_ui.core import Interrupt, RunAgentInput
from gatekeeper_harness import Topics, group_offsets, resolved, run_request

from services.kafka.partitioning import partition_for
from services.kafka.reader import TopicReader
from services.producer.agent import agent_definition
from services.producer.context import RunContext
from services.producer.settings import ProducerSettings
from services.producer.worker import Worker
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOKENS = 200
ASK = Interrupt(id="ask", reason="confirm")


async def streamer(run_input: RunAgentInput, ctx: RunContext) -> None:
    """``TOKENS`` content events, then the interrupt; a resume says so and succeeds."""
    if run_input.resume:
        await ctx.text("resumed")
        return
    message = await ctx.start_message()
    for i in range(TOKENS):
        await message.write(f"token {i} ")
    await message.end()
    ctx.raise_interrupt(ASK)


def threads_on_every_partition(partitions: int, runs_each: int) -> list[str]:
    by_partition: dict[int, list[str]] = {p: [] for p in range(partitions)}
    n = 0
    while any(len(v) < runs_each for v in by_partition.values()):
        thread = f"t-tokens-{n}"
        n += 1
        slot = by_partition[partition_for(thread, partitions)]
        if len(slot) < runs_each:
            slot.append(thread)
    return [t for v in by_partition.values() for t in v]


async def record_counts(kafka: KafkaSettings, topic: str) -> Counter[str]:
    """Records on ``topic`` by their event type header."""
    async with TopicReader(kafka, "test-counter") as reader:
        records = await reader.read_all(await reader.all_partitions(topic))
    return Counter(dict(r.headers or ()).get("agui-event-type", b"").decode() for r in records)


async def test_gatekeepers_read_no_content_event(
    kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any]
) -> None:
    first = await in_process(kafka)
    second = await in_process(kafka)
    worker = Worker(kafka, ProducerSettings.model_validate({"AGUI_AGENTS": "scripted"}),
                    {"scripted": agent_definition(streamer)})
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.run(stop))
    try:
        thread_ids = threads_on_every_partition(kafka.partitions, 2)
        asks = [run_request(f"q-{t}", t, f"{t}-r1") for t in thread_ids]
        await topics.requests(asks)
        await topics.until(lambda: all(getattr(topics.threads.get(t), "status", "")
                                       == "interrupted" for t in thread_ids),
                           within=120, what="every run interrupted (its end read on runs)")
        resumes = [run_request(f"q-{t}-2", t, f"{t}-r2", resume=resolved("ask"))
                   for t in thread_ids]
        await topics.requests(resumes)
        await topics.until(lambda: all(getattr(topics.threads.get(t), "status", "") == "idle"
                                       for t in thread_ids),
                           within=120, what="every resumed run admitted and ended")
        assert all(topics.decisions[r.request_id][-1].verdict == "admitted" for r in resumes)
    finally:
        stop.set()
        await serving

    on_events = await record_counts(kafka, kafka.topics.events)
    on_runs = await record_counts(kafka, kafka.topics.runs)
    runs = 2 * len(thread_ids)
    assert on_events["TEXT_MESSAGE_CONTENT"] == (TOKENS + 1) * len(thread_ids)  # + "resumed"
    assert on_runs == Counter({"RUN_STARTED": runs, "RUN_FINISHED": runs}), on_runs

    read: Counter[str] = Counter()
    for processor in (first, second):
        assigned = {tp.topic for tp in processor.state.require_consumer().assignment()}
        assert assigned <= {kafka.topics.requests, kafka.topics.runs}, assigned
        read.update({k.removeprefix("read "): v for k, v in processor.stats.items()
                     if k.startswith("read ")})
    assert set(read) == {kafka.topics.requests, kafka.topics.runs}, read
    # every boundary read once (a record read again after a rebalance is read by one
    # instance each time: at most twice here), and nothing else
    assert sum(on_runs.values()) <= read[kafka.topics.runs] <= 2 * sum(on_runs.values())

    offsets = await group_offsets(kafka)
    assert {tp.topic for tp in offsets} == {kafka.topics.requests, kafka.topics.runs}
