"""SIGKILL a producer worker at the moment of a run's terminal write: the end is written once.

A worker writes a run's end to ``runs`` first, then to ``events``
(``services.producer.publish``). Here the worker running the run dies
between the two (``faults.dying_worker``): its end is on ``runs``, not on
``events``. The other worker takes the partition over and must copy that
very end to ``events`` (not close the run as lost), so both topics hold one
and the same end; the gatekeeper, which reads only ``runs``, has the thread
interrupted, and a resume answering the interrupt is admitted and runs.
The checker (invariant 7: a run's end is on ``runs`` if and only if it is
on ``events``) then judges everything the deployment wrote. Both with the
checkpoints in memory and in on-disk stores (``AGUI_STATE_DIR``, one per
worker). Every agent's checkpoints share the partitions, so the survivor
may hold the dead worker's partition already, for another agent; whether it
does depends on where the thread falls, which
``tests/integration/producer/test_producer_checkpoint_takeover.py`` pins.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from ag_ui.core import RunAgentInput

from contracts import Decision, RunRequest, ThreadState, decode, encode
from contracts.headers import EVENT_TYPE, RUN_ID, header_value
from faults.dying_worker import DYING
from faults.harness import AGENT_SPECS, Stack, StackConfig, unique_prefix
from faults.load import run_input
from faults.scenario import verify
from services.kafka.clients import ConsumerRecord, new_producer
from services.kafka.reader import TopicReader
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.faults

TESTS = Path(__file__).resolve().parents[1]
TERMINALS = ("RUN_FINISHED", "RUN_ERROR")


async def thread_records(settings: KafkaSettings, topic: str,
                         thread_id: str) -> list[ConsumerRecord[Any, Any]]:
    async with TopicReader(settings, "faults-kill-at-terminal") as reader:
        records = await reader.read_all([await reader.key_partition(topic, thread_id)])
    return [r for r in records if r.key == thread_id.encode()]


async def ends(settings: KafkaSettings, topic: str, thread_id: str,
               run_id: str) -> list[ConsumerRecord[Any, Any]]:
    return [r for r in await thread_records(settings, topic, thread_id)
            if header_value(r.headers, RUN_ID) == run_id
            and header_value(r.headers, EVENT_TYPE) in TERMINALS]


async def until(check: Callable[[], Any], within_s: float, what: str) -> Any:
    deadline = time.monotonic() + within_s
    while not (found := await check()):
        assert time.monotonic() < deadline, f"timed out after {within_s:.0f} s: {what}"
        await asyncio.sleep(0.3)
    return found


async def request(settings: KafkaSettings, request_id: str, wire: dict[str, Any]) -> None:
    producer = new_producer(settings, "faults-kill-at-terminal")
    await producer.start()
    try:
        value = encode(RunRequest(request_id=request_id, agent="scripted",
                                  input=RunAgentInput.model_validate(wire),
                                  submitted_at=datetime.now(UTC)))
        await producer.send_and_wait(settings.topics.requests, value,
                                     key=wire["threadId"].encode())
    finally:
        await producer.stop()


async def verdict(settings: KafkaSettings, thread_id: str, request_id: str) -> str | None:
    for record in await thread_records(settings, settings.topics.decisions, thread_id):
        decision = decode(Decision, record.value)
        if decision.request_id == request_id and decision.verdict != "queued":
            return decision.verdict
    return None


async def status(settings: KafkaSettings, thread_id: str) -> str | None:
    states = [decode(ThreadState, r.value)
              for r in await thread_records(settings, settings.topics.threads, thread_id)]
    return states[-1].status if states else None


@pytest.mark.parametrize("stores", ["memory", "disk"])
async def test_a_worker_killed_between_the_two_writes_of_a_run_end(
    kafka_bootstrap: str, tmp_path: Path, summary: Callable[[str], None], stores: str
) -> None:
    dying = AGENT_SPECS.replace("services.producer.agents.scripted:agent",
                                "faults.dying_worker:agent")
    on_disk = {"AGUI_STATE_DIR": str(tmp_path / "state-{index}")} if stores == "disk" else {}
    config = StackConfig(gatekeepers=1, producers=2, consumers=0,
                         role_env={"producer": {"AGUI_AGENTS": dying,
                                                "PYTHONPATH": str(TESTS), **on_disk}})
    async with Stack(kafka_bootstrap, unique_prefix("kt"), tmp_path, config) as stack:
        settings = stack.settings
        tag = uuid.uuid4().hex[:8]
        thread_id, run_id = f"t-kill-{tag}", f"{DYING}{tag}"
        ask = {"id": "ask", "reason": "confirm"}
        await request(settings, f"q-{tag}", run_input(
            thread_id, run_id, script={"text": "almost done", "interrupts": [ask]}))

        async def a_worker_died() -> list[int]:
            return [i for i, p in enumerate(stack.services["producer"]) if not p.alive()]

        (dead,) = await until(a_worker_died, 60, "the worker to die at the run's end")
        on_events = await until(lambda: ends(settings, settings.topics.events, thread_id,
                                             run_id), 90, "the end copied to events")
        on_runs = await ends(settings, settings.topics.runs, thread_id, run_id)
        assert len(on_events) == 1, on_events
        assert len(on_runs) == 1, on_runs
        assert on_events[0].value == on_runs[0].value, "one and the same end"
        assert dict(on_events[0].headers) == dict(on_runs[0].headers)
        end = orjson.loads(on_events[0].value)
        assert end["type"] == "RUN_FINISHED", f"closed as lost, not copied: {end}"
        assert end["outcome"]["interrupts"] == [ask]

        await until(lambda: _is(status(settings, thread_id), "interrupted"), 60,
                    "the gatekeeper to see the end on runs")
        resume_id = f"q-{tag}-resume"
        await request(settings, resume_id, run_input(
            thread_id, f"run-{tag}-resume",
            resume=[{"interruptId": "ask", "status": "resolved", "payload": {"ok": True}}]))
        assert await until(lambda: verdict(settings, thread_id, resume_id), 60,
                           "the resume's decision") == "admitted"
        await until(lambda: _is(status(settings, thread_id), "idle"), 60,
                    "the resumed run to end")

        stack.restart("producer", dead)
        await verify(stack, summary, "producer SIGKILL between a run end's two writes",
                     f"worker {dead} killed; the end found on runs only was copied to events")


async def _is(value: Awaitable[str | None], wanted: str) -> bool:
    return await value == wanted
