"""A thread moving to another agent: the next run starts from what the last one left.

Every agent's checkpoints share the ``producer-checkpoints`` partitions, and
a worker reads a partition when it is assigned it. When a thread's next run
goes to another agent hosted by another worker, that worker's copy of the
thread's checkpoint predates the previous run: beginning from it would lose
the interrupts that run raised (their answers "unknown", a warning), forget
that this run answered them (the first agent raising them again on its next
run), and overwrite the other worker's record. The dispatch names the
previous run (``Dispatch.handover``, set by the gatekeeper when the agent
changes), and the worker reads the partition on until that run shows closed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ag_ui.core import Interrupt, ResumeEntry
from producer_harness import Relay, checkpointed, first_input, in_process_worker, resume_input

from contracts import Handover
from services.kafka.admin import ensure_topics
from services.kafka.clients import AIOKafkaProducer
from services.kafka.partitioning import partition_for
from services.kafka.reader import TopicReader
from services.producer import checkpoint as cp
from services.producer.checkpoint_disk import CheckpointDisk
from services.producer.context import WARNING_EVENT
from services.producer.store import Change, CheckpointStore
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
ECHO = "echo=services.producer.agents.scripted:agent"
"""The scripted agent under a second name: a second agent, hosted by a second worker."""


def resolved(interrupt_id: str) -> ResumeEntry:
    return ResumeEntry(interrupt_id=interrupt_id, status="resolved")


async def test_a_thread_moving_between_agents_on_two_workers_keeps_its_interrupts(
        kafka: KafkaSettings, relay: Relay) -> None:
    await ensure_topics(kafka, ("echo",))
    thread = f"t-move-{uuid.uuid4().hex[:8]}"
    async with in_process_worker(kafka, "scripted") as first, \
            in_process_worker(kafka, ECHO) as second:
        raised = await relay.run("scripted", first_input(
            thread, "m1", script={"interrupts": [{"id": "i-1", "reason": "input"}]}))
        assert raised.outcome["type"] == "interrupt"

        await relay.dispatch("echo", resume_input(raised, "m2", [resolved("i-1")]),
                             handover=Handover(run_id="m1", agent="scripted"))
        answered = await relay.finished("m2")
        answered.assert_conformant()
        assert answered.text() == "i-1=resolved"
        warnings = [w["value"]["code"] for w in answered.wire
                    if w["type"] == "CUSTOM" and w["name"] == WARNING_EVENT]
        assert warnings == [], "the answer to the first agent's interrupt was not recognised"
        assert answered.outcome == {"type": "success"}
        state = await checkpointed(second, thread, "m2")
        assert {"m1", "m2"} <= set(state.closed_runs)  # the first worker's record, kept

        await relay.dispatch("scripted", resume_input(answered, "m3", [],
                                                      script={"text": "done"}),
                             handover=Handover(run_id="m2", agent="echo"))
        back = await relay.finished("m3")
        back.assert_conformant()
        assert back.outcome == {"type": "success"}, "an answered interrupt was raised again"
        assert cp.open_interrupts(await checkpointed(first, thread, "m3")) == []


def stores(kafka: KafkaSettings, producers: list[AIOKafkaProducer], kind: str,
           disks: list[CheckpointDisk], root: Path) -> tuple[CheckpointStore, CheckpointStore]:
    """The previous agent's worker's store (in memory) and the next one's (``kind``)."""
    disk = None
    if kind == "disk":
        disk = CheckpointDisk(root, "unused", cache_mb=1, grace_s=60)
        disks.append(disk)
    return (CheckpointStore(kafka, producers[0], clock=lambda: NOW),
            CheckpointStore(kafka, producers[1], clock=lambda: NOW, disk=disk))


def begin(run_id: str, agent: str) -> Change:
    return lambda c: cp.begin_run(c, run_id=run_id, request_id=f"q-{run_id}", agent=agent,
                                  worker="w", still_open=[], now=NOW)


def end(run_id: str, *open_after: str) -> Change:
    return lambda c: cp.end_run(c, run_id=run_id, now=NOW, open_after=[
        Interrupt(id=i, reason="input") for i in open_after])


async def begun_elsewhere(before: CheckpointStore, after: CheckpointStore, prefix: str,
                          partitions: int) -> str:
    """A new thread whose run ``m1`` of ``scripted`` began in ``before``, both stores
    having read the thread's partition first (as workers do when assigned it)."""
    thread = f"{prefix}-{uuid.uuid4().hex[:8]}"
    p = partition_for(thread, partitions)
    await before.restore([p], "scripted")
    await after.restore([p], "echo")
    await before.update(thread, begin("m1", "scripted"))
    return thread


@pytest.mark.parametrize("kind", ["memory", "disk"])
async def test_a_handover_waits_for_the_previous_runs_end_marker(
        kafka: KafkaSettings, producers: list[AIOKafkaProducer], kind: str,
        disks: list[CheckpointDisk], tmp_path: Path) -> None:
    before, after = stores(kafka, producers, kind, disks, tmp_path / "store")
    thread = await begun_elsewhere(before, after, "t-late", kafka.partitions)
    assert after.known(thread) is None

    waiting = asyncio.create_task(after.handover(thread, "m1", "scripted", within_s=60))
    await until(lambda: after.known(thread) is not None, "the handover read the start marker")
    assert not waiting.done()  # m1 shows begun and not ended: it reads on
    await before.update(thread, end("m1", "i-1"))  # the end marker, after the terminal event
    assert await waiting
    found = after.known(thread)
    assert found is not None
    assert found.active is None
    assert cp.has_closed(found, "m1")
    assert [i.id for i in cp.open_interrupts(found)] == ["i-1"]


@pytest.mark.parametrize("kind", ["memory", "disk"])
async def test_a_handover_gives_up_on_a_run_whose_end_never_comes_and_skips_unmarked_runs(
        kafka: KafkaSettings, producers: list[AIOKafkaProducer], kind: str,
        disks: list[CheckpointDisk], tmp_path: Path) -> None:
    before, after = stores(kafka, producers, kind, disks, tmp_path / "store")
    thread = await begun_elsewhere(before, after, "t-dead", kafka.partitions)  # and dies

    assert not await after.handover(thread, "m1", "scripted", within_s=0.3)
    left = after.known(thread)
    assert left is not None
    assert left.active is not None
    assert left.active.run_id == "m1"  # read, for the next run to see it was left open

    refused = f"t-refused-{uuid.uuid4().hex[:8]}"  # a refused run writes no marker at all
    await after.restore([partition_for(refused, kafka.partitions)], "echo")
    assert await after.handover(refused, "never-marked", "scripted", within_s=60)
    assert after.known(refused) is None


async def test_a_run_waiting_for_its_handover_when_the_worker_stops_is_left_to_the_next_owner(
        kafka: KafkaSettings, relay: Relay, producers: list[AIOKafkaProducer]) -> None:
    """Its partition is revoked while it waits: it must not begin there after that, and
    its input is not committed, so the next owner runs it."""
    await ensure_topics(kafka, ("echo",))
    dead = CheckpointStore(kafka, producers[0], clock=lambda: NOW)
    thread = f"t-stop-{uuid.uuid4().hex[:8]}"
    await dead.restore([partition_for(thread, kafka.partitions)], "scripted")
    await dead.update(thread, begin("m1", "scripted"))  # its worker dies: it never ends
    async with in_process_worker(kafka, ECHO, AGUI_HANDOVER_WAIT_S=5,
                                 AGUI_PRODUCER_DRAIN_S=0.5) as first:
        await relay.dispatch("echo", first_input(thread, "m2", script={"text": "once"}),
                             handover=Handover(run_id="m1", agent="scripted"))
        (host,) = first.hosts
        await until(lambda: host.scheduler.running == 1, "the run waits for its handover")
    async with TopicReader(kafka, "handover-test") as reader:
        written = await reader.read_all([await reader.key_partition(kafka.topics.events,
                                                                    thread)])
    assert [r for r in written if r.key == thread.encode()] == [], "began after the revoke"

    async with in_process_worker(kafka, ECHO, AGUI_HANDOVER_WAIT_S=0.5):
        ran = await relay.finished("m2", 60)
    assert ran.text() == "once"
    assert ran.types.count("RUN_STARTED") == 1


async def until(check: Callable[[], bool], what: str, within_s: float = 30.0) -> None:
    try:
        async with asyncio.timeout(within_s):
            while not check():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out waiting until {what}") from None
