"""Hostile sizes through a real broker: the worker never dies, never loops, and goes on.

Each test writes a dispatch another client could have written (or runs an
agent that misbehaves), checks the run ends with exactly one RUN_ERROR
naming the limit (or the dispatch is dead-lettered), and then runs a normal
dispatch on the same worker: it must be served.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import RunAgentInput
from faults.topic_configs import alter_topic
from producer_harness import (
    Relay,
    RunView,
    WorkerProcess,
    first_input,
    in_process_worker,
    still_serves,
)

from contracts import DeadLetter, decode
from services.cli.settings_errors import USAGE_ERROR
from services.kafka.clients import ConsumerRecord
from services.kafka.reader import TopicReader
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


def one_error(view: RunView, code: str) -> dict[str, Any]:
    view.assert_conformant()
    assert view.types.count("RUN_ERROR") == 1
    error = view.terminal
    assert error["type"] == "RUN_ERROR", error
    assert error["code"] == code, error
    return error


def asking(count: int) -> dict[str, Any]:
    """A scripted agent's script raising ``count`` small interrupts."""
    return {"interrupts": [{"id": f"i-{n}", "reason": "approval"} for n in range(count)]}


def checkpoint_error(view: RunView) -> None:
    error = one_error(view, "checkpoint_too_large")
    assert view.types == ["RUN_STARTED", "RUN_ERROR"]
    assert "checkpoint" in error["message"]
    assert "16384" in error["message"]


async def test_finding_2_a_50000_character_run_id_with_50_interrupts_ends_in_one_run_error(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka) as worker:
        view = await relay.run("scripted", first_input("t-finding-2", "r" * 50_000,
                                                       script=asking(50)))
        error = one_error(view, "input_too_large")
        assert view.types == ["RUN_STARTED", "RUN_ERROR"]
        assert "runId is 50000 characters" in error["message"]
        assert "input" not in view.wire[0]  # the broken input is not echoed
        await still_serves(relay, worker, "t-finding-2")


async def test_an_agent_event_of_1_1_mb_ends_event_too_large_and_the_next_run_works(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka) as worker:
        view = await relay.run("scripted", first_input(
            "t-big-event", script={"text": "x", "repeat": 1_100_000}))
        error = one_error(view, "event_too_large")
        assert view.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_END",
                              "RUN_ERROR"]
        assert "TEXT_MESSAGE_CONTENT" in error["message"]
        assert "1100" in error["message"]
        await still_serves(relay, worker, "t-big-event")


async def test_an_end_marker_over_the_record_limit_ends_checkpoint_too_large(
        kafka: KafkaSettings, relay: Relay) -> None:
    # Each open interrupt's checkpoint entry repeats the 250-character run id: 90 of them
    # make a 30 KB checkpoint from a 3 KB interrupt outcome (within 16 KiB / 4).
    small = kafka.model_copy(update={"max_record_bytes": 16_384})
    async with in_process_worker(small) as worker:
        checkpoint_error(await relay.run("scripted", first_input(
            "t-big-checkpoint", "c" * 250, script=asking(90))))
        await still_serves(relay, worker, "t-big-checkpoint")


async def test_a_start_marker_over_the_record_limit_ends_checkpoint_too_large(
        kafka: KafkaSettings, relay: Relay) -> None:
    # Run 1's end marker (47 open interrupts, each naming its 250-character run id) fits
    # 16 KiB by ~500 bytes; run 2's start marker adds the active run (ids, a 100-character
    # worker id) and does not.
    small = kafka.model_copy(update={"max_record_bytes": 16_384})
    async with in_process_worker(small, AGUI_WORKER_ID="w" * 100) as worker:
        first = await relay.run("scripted", first_input("t-start-marker", "a" * 250,
                                                        script=asking(47)))
        first.assert_conformant()
        assert first.outcome["type"] == "interrupt"
        checkpoint_error(await relay.run("scripted", first_input("t-start-marker", "b" * 250)))
        await still_serves(relay, worker, "t-start-marker-next")


async def test_a_deep_dispatch_is_opened_and_ends_input_too_large(
        kafka: KafkaSettings, relay: Relay) -> None:
    deep: Any = "bottom"
    for _ in range(100):
        deep = {"d": deep}
    run_input = RunAgentInput.model_validate({**first_input("t-deep", "deep-1").model_dump(
        mode="json", by_alias=True), "state": deep})
    async with in_process_worker(kafka) as worker:
        error = one_error(await relay.run("scripted", run_input), "input_too_large")
        assert "AGUI_MAX_JSON_DEPTH" in error["message"]
        await still_serves(relay, worker, "t-deep")


async def dead_letters(settings: KafkaSettings) -> Sequence[ConsumerRecord[bytes, bytes]]:
    async with TopicReader(settings, "producer-test-deadletters") as reader:
        return await reader.read_all(await reader.all_partitions(settings.topics.deadletter))


async def test_a_dispatch_whose_refusal_cannot_be_written_is_dead_lettered(
        kafka: KafkaSettings, relay: Relay) -> None:
    # A 140,000-character threadId: key and value of its RUN_STARTED alone pass 256 KiB.
    small = kafka.model_copy(update={"max_record_bytes": 262_144})
    thread_id = "t" * 140_000
    async with in_process_worker(small) as worker:
        await relay.dispatch("scripted", first_input(thread_id, "unopenable"))
        await still_serves(relay, worker, "t-after-dead-letter")
        assert "unopenable" not in relay.runs
        (record,) = [r for r in await dead_letters(kafka)
                     if decode(DeadLetter, r.value).code == "input_too_large"]
        letter = decode(DeadLetter, record.value)
        assert letter.service == "producer"
        assert letter.source_topic == kafka.topics.dispatch("scripted")
        assert "threadId is 140000 characters" in letter.reason
        assert "RUN_STARTED" in letter.reason
        assert len(record.value) <= 262_144


async def refused_at_start(kafka: KafkaSettings, tmp_path: Path, **env: str) -> str:
    """The log of a worker that exits 2 at start, as a configuration it refuses makes it."""
    worker = WorkerProcess(kafka, tmp_path / "worker.log", AGUI_HEALTH_PORT="0", **env)
    worker.start()
    assert worker.proc is not None
    try:
        code = await asyncio.to_thread(worker.proc.wait, 60)
    finally:
        worker.stop()
    text = worker.log_text()
    assert code == USAGE_ERROR, text
    assert "Traceback" not in text
    return text


async def test_a_record_limit_over_the_topics_own_stops_the_worker_at_start(
        kafka: KafkaSettings, tmp_path: Path) -> None:
    """AGUI_MAX_RECORD_BYTES above the topics' ``max.message.bytes`` let an event between
    the two through the worker's own check; the broker refused it, the idempotent
    producer did not survive that, and the worker stopped with every run on it (found by
    probing). Now it does not start: one line names the limit and the topics."""
    text = await refused_at_start(kafka, tmp_path, AGUI_MAX_RECORD_BYTES="4000000")
    assert f"AGUI_MAX_RECORD_BYTES=4,000,000 is over the max.message.bytes of " \
           f"{kafka.topics.events} (1,048,588)" in text


async def test_a_checkpoints_topic_not_compacted_stops_the_worker_at_start(
        kafka: KafkaSettings, tmp_path: Path) -> None:
    """The workers restore every thread's run markers from ``producer-checkpoints``: under
    ``delete`` retention removes live markers (a run left open would never be closed).
    The worker does not start: one line names the topic and how to set it back."""
    await alter_topic(kafka, kafka.topics.checkpoints, {"cleanup.policy": "delete"})
    text = await refused_at_start(kafka, tmp_path)
    assert f"{kafka.topics.checkpoints} (cleanup.policy=delete)" in text
