"""Many threads at once on one worker: per-thread order, bounded concurrency, commits."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from producer_harness import Relay, RunView, first_input, in_process_worker

from services.kafka.clients import new_admin
from services.kafka.reader import TopicReader
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 200
RUNS_PER_THREAD = 3
MAX_RUNS = 64


def open_at_once(records: list[tuple[int, str, str]]) -> int:
    """The most runs open at one point of a partition (a lower bound of concurrency)."""
    open_runs: set[str] = set()
    most = 0
    for _, run_id, kind in records:
        if kind == "RUN_STARTED":
            open_runs.add(run_id)
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            open_runs.discard(run_id)
        most = max(most, len(open_runs))
    return most


async def committed_everything(settings: KafkaSettings, group: str, topic: str,
                               within_s: float = 15.0) -> bool:
    admin = new_admin(settings)
    await admin.start()
    try:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            offsets = await admin.list_consumer_group_offsets(group)
            committed = {tp.partition: meta.offset for tp, meta in offsets.items()
                         if tp.topic == topic}
            async with TopicReader(settings) as reader:
                ends = await reader.end_offsets(await reader.all_partitions(topic))
            if all(committed.get(tp.partition) == end for tp, end in ends.items() if end):
                return True
            await asyncio.sleep(0.3)
        return False
    finally:
        await admin.close()


async def test_200_concurrent_threads_keep_per_thread_order(kafka: KafkaSettings,
                                                            relay: Relay) -> None:
    threads = [f"t{i:03d}" for i in range(THREADS)]
    inputs = {t: [first_input(t, f"{t}-r{k}", script={"text": f"{t}/{k}",
                                                       "delayMs": (i * 7 + k * 13) % 40})
                  for k in range(RUNS_PER_THREAD)]
              for i, t in enumerate(threads)}
    async with in_process_worker(kafka, "scripted", AGUI_MAX_CONCURRENT_RUNS=MAX_RUNS):
        for k in range(RUNS_PER_THREAD):  # each thread's runs queue behind each other
            await relay.dispatch("scripted", *(inputs[t][k] for t in threads))
        views: dict[str, RunView] = {}
        for t in threads:
            for run_input in inputs[t]:
                views[run_input.run_id] = await relay.finished(run_input.run_id, within_s=90)
        assert await committed_everything(kafka, f"{kafka.topic_prefix}.producer.scripted",
                                          kafka.topics.dispatch("scripted"))

    for t in threads:
        runs = [views[i.run_id] for i in inputs[t]]
        for k, view in enumerate(runs):
            view.assert_conformant()
            assert view.text() == f"{t}/{k}"
            assert view.outcome == {"type": "success"}
        partitions = {r.partition for view in runs for r in view.records}
        assert len(partitions) == 1
        offsets = [[r.offset for r in view.records] for view in runs]
        for earlier, later in itertools.pairwise(offsets):
            assert max(earlier) < min(later), f"thread {t}: runs overlap or are out of order"

    by_partition: dict[int, list[tuple[int, str, str]]] = {}
    for view in views.values():
        for record, header in zip(view.records, view.headers, strict=True):
            by_partition.setdefault(record.partition, []).append(
                (record.offset, header.run_id, header.event_type))
    overlaps = [open_at_once(sorted(records)) for records in by_partition.values()]
    assert max(overlaps) > 1, "runs of different threads never ran at the same time"
    assert max(overlaps) <= MAX_RUNS


async def test_a_second_worker_joining_mid_run_takes_partitions_without_repeating_a_run(
        kafka: KafkaSettings, relay: Relay) -> None:
    first_batch = [first_input(f"j{i:02d}", f"j{i:02d}-a", script={"text": "a", "delayMs": 400})
                   for i in range(40)]
    second_batch = [first_input(f"j{i:02d}", f"j{i:02d}-b", script={"text": "b"})
                    for i in range(40)]
    async with in_process_worker(kafka, "scripted", AGUI_PRODUCER_DRAIN_S=10) as first:
        await relay.dispatch("scripted", *first_batch)
        await relay.started(first_batch[-1].run_id)
        async with in_process_worker(kafka, "scripted", AGUI_PRODUCER_DRAIN_S=10) as second:
            await relay.dispatch("scripted", *second_batch)
            views = [await relay.finished(r.run_id, within_s=60)
                     for r in [*first_batch, *second_batch]]
            owned = [w.hosts[0].partitions for w in (first, second)]
    for view in views:
        view.assert_conformant()
        assert view.outcome == {"type": "success"}
    assert owned[0]
    assert owned[1]
    assert not owned[0] & owned[1]
