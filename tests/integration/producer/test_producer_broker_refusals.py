"""Records the broker refuses for their size, a topic's limit lowered under a running worker.

The worker checks the topics' ``max.message.bytes`` against ``AGUI_MAX_RECORD_BYTES``
when it starts; an operator lowering one afterwards (``kafka-configs``) lets a record
between the two pass every check of the worker's and be refused by the broker. The run
ends with one RUN_ERROR naming the topic and the setting, on ``runs`` and ``events``
as every end; the worker keeps serving, the same thread included.
"""

from __future__ import annotations

from typing import Any

import pytest
from faults.topic_configs import alter_topic
from producer_harness import Relay, RunView, first_input, in_process_worker, still_serves

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def set_max_message_bytes(settings: KafkaSettings, topic: str, size: int) -> None:
    """``kafka-configs --alter --entity-type topics --add-config max.message.bytes=size``."""
    await alter_topic(settings, topic, {"max.message.bytes": str(size)})


def refused(view: RunView, code: str, topic: str) -> dict[str, Any]:
    """The run's one RUN_ERROR (records of a batch the broker refused are missing: their
    numbers are a gap the stream gives up waiting on)."""
    assert [t for t in view.types if t in ("RUN_FINISHED", "RUN_ERROR")] == ["RUN_ERROR"]
    error = view.terminal
    assert error["type"] == "RUN_ERROR", error
    assert error["code"] == code, error
    assert f"too large for {topic}" in error["message"], error
    assert "max.message.bytes" in error["message"], error
    return error


async def test_an_event_over_events_lowered_limit_ends_the_run_not_the_worker(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka) as worker:
        await still_serves(relay, worker, "t-events-limit")  # the partition written once
        await set_max_message_bytes(kafka, kafka.topics.events, 4000)
        view = await relay.run("scripted", first_input(
            "t-events-limit", script={"text": "x", "repeat": 10_000}))
        error = refused(view, "event_too_large", kafka.topics.events)
        assert "TEXT_MESSAGE_CONTENT" in error["message"]
        assert "10" in error["message"]
        await still_serves(relay, worker, "t-events-limit")


async def test_a_run_end_over_runs_lowered_limit_ends_in_a_run_error(
        kafka: KafkaSettings, relay: Relay) -> None:
    """The run's RUN_STARTED and its (long) RUN_ERROR fit ``events`` but not ``runs``:
    the end is a short RUN_ERROR saying so, on both topics."""
    async with in_process_worker(kafka) as worker:
        await still_serves(relay, worker, "t-runs-limit")
        await set_max_message_bytes(kafka, kafka.topics.runs, 4000)
        view = await relay.run("scripted", first_input("t-runs-limit",
                                                       script={"fail": "f" * 6000}))
        refused(view, "event_too_large", kafka.topics.runs)
        assert view.types == ["RUN_STARTED", "RUN_ERROR"]
        await still_serves(relay, worker, "t-runs-limit")


async def test_a_start_marker_over_checkpoints_lowered_limit_ends_checkpoint_too_large(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with in_process_worker(kafka) as worker:
        await still_serves(relay, worker, "t-checkpoints-limit")
        await set_max_message_bytes(kafka, kafka.topics.checkpoints, 200)
        view = await relay.run("scripted", first_input("t-checkpoints-limit"))
        refused(view, "checkpoint_too_large", kafka.topics.checkpoints)
        assert view.types == ["RUN_STARTED", "RUN_ERROR"]
        await set_max_message_bytes(kafka, kafka.topics.checkpoints, 1_048_588)
        await still_serves(relay, worker, "t-checkpoints-limit")
