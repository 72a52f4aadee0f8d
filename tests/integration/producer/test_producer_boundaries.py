"""Every run's start and end reach ``runs`` too, the same records; recovery mends either side.

A worker writes each run's ``RUN_STARTED`` and terminal event to ``runs`` as
well as ``events`` (the gatekeeper reads only ``runs``). Laid down directly
on the topics: the states a dying worker can leave between the two writes of
a run's end, and the one a worker of an earlier version leaves; the worker
taking the partitions over must leave every run with one and the same end
on both topics.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from producer_harness import Relay, first_input, in_process_worker

from contracts import EventHeaders
from services.kafka.clients import ConsumerRecord
from services.kafka.reader import TopicReader
from services.producer import checkpoint as cp
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC) - timedelta(seconds=5)
TERMINALS = ("RUN_FINISHED", "RUN_ERROR")


async def lay_down(relay: Relay, thread_id: str, run_id: str, *, events: list[dict[str, Any]],
                   runs: list[tuple[int, dict[str, Any]]]) -> None:
    """A start marker saying ``run_id`` is active, ``events`` (numbered from 0) and ``runs``
    (numbered as given), as a worker that died would have left them."""
    state = cp.begin_run(cp.fresh(thread_id), run_id=run_id, request_id=f"req-{run_id}",
                         agent="scripted", worker="dead-worker", still_open=[], now=NOW)
    topics, producer = relay.settings.topics, relay.producer
    await (await producer.send(topics.checkpoints, cp.to_bytes(state), key=thread_id.encode()))
    placed = [(topics.events, seq, event) for seq, event in enumerate(events)]
    placed += [(topics.runs, seq, event) for seq, event in runs]
    for topic, seq, event in placed:
        headers = EventHeaders(run_id, event["type"], "scripted", seq).encode()
        await (await producer.send(topic, orjson.dumps(event), key=thread_id.encode(),
                                   headers=headers))


def started(thread_id: str, run_id: str) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id,
            "protocolVersion": "1.0"}


def interrupted(thread_id: str, run_id: str) -> dict[str, Any]:
    return {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id,
            "outcome": {"type": "interrupt", "interrupts": [{"id": "asked", "reason": "input"}]}}


async def boundaries(settings: KafkaSettings, run_id: str) -> list[ConsumerRecord[Any, Any]]:
    async with TopicReader(settings, "producer-test-runs") as reader:
        records = await reader.read_all(await reader.all_partitions(settings.topics.runs))
    return [r for r in records if dict(r.headers or ())["agui-run-id"] == run_id.encode()]


def same(record: ConsumerRecord[Any, Any], other: ConsumerRecord[Any, Any]) -> bool:
    return (record.key, record.value, list(record.headers)) == (
        other.key, other.value, list(other.headers))


async def test_a_run_writes_its_start_and_end_to_runs_as_on_events(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka, "scripted"):
        view = await relay.run("scripted", first_input("t-b", "r-b", script={"text": "hi"}))
    on_runs = await boundaries(kafka, "r-b")
    assert [dict(r.headers)["agui-event-type"] for r in on_runs] == [b"RUN_STARTED",
                                                                      b"RUN_FINISHED"]
    assert same(on_runs[0], view.records[0])
    assert same(on_runs[1], view.records[-1])
    assert on_runs[1].partition == view.records[-1].partition  # co-partitioned


async def test_recovery_leaves_one_and_the_same_end_on_both_topics(
        kafka: KafkaSettings, relay: Relay) -> None:
    # died between the two writes of its end: the end on runs only
    await lay_down(relay, "t-half", "r-half",
                   events=[started("t-half", "r-half"),
                           {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
                           {"type": "TEXT_MESSAGE_END", "messageId": "m"}],
                   runs=[(0, started("t-half", "r-half")), (3, interrupted("t-half", "r-half"))])
    # died before its RUN_STARTED reached events, after its end reached runs
    await lay_down(relay, "t-bare", "r-bare", events=[],
                   runs=[(0, started("t-bare", "r-bare")),
                         (1, {"type": "RUN_ERROR", "message": "x", "code": "y"})])
    # an earlier version's worker: events only
    await lay_down(relay, "t-old", "r-old",
                   events=[started("t-old", "r-old"), interrupted("t-old", "r-old")], runs=[])
    # died mid-run: no end anywhere
    await lay_down(relay, "t-mid", "r-mid", events=[started("t-mid", "r-mid")],
                   runs=[(0, started("t-mid", "r-mid"))])

    async with in_process_worker(kafka, "scripted") as worker:
        half = await relay.finished("r-half")
        assert half.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_END",
                              "RUN_FINISHED"]
        assert half.terminal == interrupted("t-half", "r-half"), "copied, not closed as lost"
        bare = await relay.finished("r-bare")
        assert bare.types == ["RUN_STARTED", "RUN_ERROR"]
        assert bare.terminal["code"] == "y"
        mid = await relay.finished("r-mid")
        assert mid.types == ["RUN_STARTED", "RUN_ERROR"]
        assert mid.terminal["code"] == "worker_lost"
        old = await relay.finished("r-old")
        for view in (half, bare, mid, old):
            view.assert_conformant()
            ends = [r for r in await boundaries(kafka, view.run_id)
                    if dict(r.headers)["agui-event-type"].decode() in TERMINALS]
            assert len(ends) == 1, view.run_id
            assert same(ends[0], view.records[-1]), view.run_id
        assert worker.store is not None
        assert [i.id for i in cp.open_interrupts(worker.store.get("t-half"))] == ["asked"]
        assert cp.has_closed(worker.store.get("t-old"), "r-old")
