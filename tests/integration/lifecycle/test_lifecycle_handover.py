"""A thread moving between agents hosted by different workers, through the gatekeeper.

A real gatekeeper (a child process) and two workers in the test's loop, one
hosting ``scripted`` and the other the same agent under the name ``echo``.
The thread's first run raises an interrupt on ``scripted``; the resume goes
to ``echo``, which must recognise the answer; the next run goes back to
``scripted``, which must not raise the answered interrupt again. Each move
is dispatched with the previous run named (``Dispatch.handover``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ag_ui.core import ResumeEntry
from gatekeeper_harness import GatekeeperProcess, Topics
from lifecycle_harness import interrupted, request
from producer_harness import Relay, in_process_worker

from contracts import Dispatch, Handover, decode
from services.kafka.admin import ensure_topics
from services.kafka.reader import TopicReader
from services.producer.context import WARNING_EVENT
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

ECHO = "echo=services.producer.agents.scripted:agent"


async def dispatched(kafka: KafkaSettings, agent: str, run_id: str) -> list[Dispatch]:
    """The dispatches of ``run_id`` on ``dispatch.<agent>``."""
    async with TopicReader(kafka, "handover-test") as reader:
        records = await reader.read_all(
            await reader.all_partitions(kafka.topics.dispatch(agent)))
    return [d for d in (decode(Dispatch, r.value) for r in records) if d.input.run_id == run_id]


async def test_a_thread_moves_between_agents_on_two_workers_and_keeps_its_interrupts(
        kafka: KafkaSettings, topics: Topics, events: Relay,
        processes: Callable[..., GatekeeperProcess]) -> None:
    await ensure_topics(kafka, ("echo",))
    gatekeeper = processes(kafka)
    gatekeeper.start()
    await gatekeeper.ready()
    async with in_process_worker(kafka, "scripted"), in_process_worker(kafka, ECHO):
        asked = await topics.decide(request("q1", "th", "m1", "scripted", props={
            "script": {"interrupts": [{"id": "i-1", "reason": "input"}]}}))
        assert asked.verdict == "admitted", asked.message
        await interrupted(topics, events, "th", "m1")

        answer = await topics.decide(request("q2", "th", "m2", "echo", resume=[
            ResumeEntry(interrupt_id="i-1", status="resolved")]))
        assert answer.verdict == "admitted", answer.message
        (moved,) = await dispatched(kafka, "echo", "m2")  # a topic ``topics`` does not read
        assert moved.handover == Handover(run_id="m1", agent="scripted")
        answered = await events.finished("m2", 60)
        assert answered.text() == "i-1=resolved"
        assert [w["value"]["code"] for w in answered.wire
                if w["type"] == "CUSTOM" and w["name"] == WARNING_EVENT] == []
        assert answered.outcome == {"type": "success"}
        await topics.until(lambda: (s := topics.threads.get("th")) is not None
                           and s.status == "idle", 30, "th idle")

        back = await topics.decide(request("q3", "th", "m3", "scripted",
                                           props={"script": {"text": "done"}}))
        assert back.verdict == "admitted", back.message
        (returned,) = topics.dispatched("th", "m3")
        assert returned.handover == Handover(run_id="m2", agent="echo")
        finished = await events.finished("m3", 60)
        assert finished.outcome == {"type": "success"}, "the answered interrupt came back"
        finished.assert_conformant()
    assert gatekeeper.terminate() == 0
