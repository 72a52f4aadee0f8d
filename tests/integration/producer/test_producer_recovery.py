"""Recovery: the runs a dead worker left open are closed, none is run twice, no effect repeats.

The first test lays down, directly on the topics, the state a worker leaves
when it dies between each two steps of a run's commit order
(``services.producer.execution``) and checks what the worker taking the
partitions over publishes. The second SIGKILLs a real worker process in
the middle of two runs — one of them inside an approved execution — and
restarts another. Both run with the checkpoints in memory and in on-disk
stores (``AGUI_STATE_DIR``: recovery finds the left-open runs by the stores'
marks; a second worker on the same directory waits for the dead one's lock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt, ResumeEntry
from producer_harness import Relay, WorkerProcess, first_input, in_process_worker, resume_input

from contracts import EventHeaders
from services.producer import checkpoint as cp
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC) - timedelta(seconds=5)
ASKED = Interrupt(id="asked", reason="input")


async def lay_down(relay: Relay, thread_id: str, run_id: str, agent: str,
                   events: list[dict[str, Any]], still_open: list[Interrupt] | None = None,
                   ) -> None:
    """A checkpoint whose start marker says ``run_id`` is active, and its events so far."""
    state = cp.begin_run(cp.fresh(thread_id), run_id=run_id, request_id=f"req-{run_id}",
                         agent=agent, worker="dead-worker", still_open=still_open or [],
                         now=NOW)
    producer = relay.producer
    await (await producer.send(relay.settings.topics.checkpoints, cp.to_bytes(state),
                               key=thread_id.encode()))
    for seq, event in enumerate(events):
        headers = EventHeaders(run_id, event["type"], agent, seq)
        await (await producer.send(relay.settings.topics.events, orjson.dumps(event),
                                   key=thread_id.encode(), headers=headers.encode()))


def started(thread_id: str, run_id: str) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id,
            "protocolVersion": "1.0"}


def interrupted(thread_id: str, run_id: str) -> dict[str, Any]:
    return {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id,
            "outcome": {"type": "interrupt", "interrupts": [{"id": "asked", "reason": "input"}]}}


@pytest.mark.parametrize("store", ["memory", "disk"])
async def test_a_run_left_open_at_any_step_is_closed_exactly_once(kafka: KafkaSettings,
                                                                  relay: Relay, store: str,
                                                                  tmp_path: Path) -> None:
    await lay_down(relay, "t-started", "r-started", "scripted", [])
    await lay_down(relay, "t-mid", "r-mid", "scripted", [
        started("t-mid", "r-mid"), {"type": "TEXT_MESSAGE_START", "messageId": "m"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "half"}])
    await lay_down(relay, "t-kept", "r-kept", "scripted", [started("t-kept", "r-kept")],
                   still_open=[ASKED])
    await lay_down(relay, "t-written", "r-written", "scripted",
                   [started("t-written", "r-written"), interrupted("t-written", "r-written")])
    await lay_down(relay, "t-other", "r-other", "approval", [started("t-other", "r-other")])
    # The dead worker's dispatch of r-mid was never committed: it comes again.
    await relay.dispatch("scripted", first_input("t-mid", "r-mid"))

    env = {"AGUI_STATE_DIR": str(tmp_path / "state")} if store == "disk" else {}
    async with in_process_worker(kafka, "scripted", **env) as worker:
        lost = await relay.finished("r-started")
        assert lost.types == ["RUN_STARTED", "RUN_ERROR"]
        assert lost.terminal["code"] == "worker_lost"
        lost.assert_conformant()

        mid = await relay.finished("r-mid")
        assert mid.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                             "RUN_ERROR"]
        assert [h.seq for h in mid.headers] == [0, 1, 2, 3]

        kept = await relay.finished("r-kept")
        assert kept.types == ["RUN_STARTED", "RUN_ERROR"]

        # Later runs on the same threads: nothing more was published for the old ones;
        # the interrupt the written terminal event asked for, and the one the lost
        # run's start marker kept open, are both still recognised when answered.
        for thread_id, run_id in [("t-written", "r-written-next"), ("t-kept", "r-kept-next")]:
            answered = await relay.run("scripted", first_input(thread_id, run_id).model_copy(
                update={"resume": [ResumeEntry(interrupt_id="asked", status="resolved")]}))
            assert answered.text() == "asked=resolved"
            assert not [w for w in answered.wire if w["type"] == "CUSTOM"]
        await relay.run("scripted", first_input("t-mid", "r-mid-next"))
        assert relay.runs["r-written"].types == ["RUN_STARTED", "RUN_FINISHED"]
        assert relay.runs["r-mid"].types.count("RUN_STARTED") == 1

        assert worker.store is not None
        for thread_id, run_id in [("t-started", "r-started"), ("t-mid", "r-mid"),
                                  ("t-written", "r-written")]:
            state = worker.store.get(thread_id)
            assert state.active is None or state.active.run_id != run_id
            assert cp.has_closed(state, run_id)
        other = worker.store.get("t-other").active
        assert other is not None  # another agent's run is that agent's workers' business
        assert other.run_id == "r-other"


async def wait_for(predicate: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def ledger_lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


@pytest.mark.parametrize("store", ["memory", "disk"])
async def test_sigkilled_worker_leaves_no_run_open_and_repeats_no_approval(
        kafka: KafkaSettings, relay: Relay, tmp_path: Path, store: str) -> None:
    ledger = tmp_path / "executions.jsonl"
    env = {"AGUI_AGENTS": "approval,scripted", "AGUI_APPROVAL_LEDGER": str(ledger),
           "AGUI_PRODUCER_SESSION_TIMEOUT_MS": "6000"}
    if store == "disk":
        env["AGUI_STATE_DIR"] = str(tmp_path / "state")
    first_worker = WorkerProcess(kafka, tmp_path / "worker-1.log", **env)
    second_worker = WorkerProcess(kafka, tmp_path / "worker-2.log", **env)
    try:
        first_worker.start()
        asked = await relay.run("approval", first_input("t-apr", "ap1"), within_s=60)
        (interrupt,) = asked.outcome["interrupts"]
        approve = [ResumeEntry(interrupt_id=interrupt["id"], status="resolved",
                               payload={"approved": True})]
        await relay.dispatch("approval", resume_input(asked, "ap2", approve,
                                                      executionDelayMs=60_000))
        await relay.dispatch("scripted", first_input("t-long", "lg1",
                                                     script={"text": "long", "delayMs": 60_000}))
        await wait_for(lambda: len(ledger_lines(ledger)) == 1, 30, "the approved execution")
        await wait_for(lambda: "TEXT_MESSAGE_END" in getattr(relay.runs.get("lg1"), "types", []),
                       30, "the long run's text")

        first_worker.kill()
        second_worker.start()

        for run_id in ("ap2", "lg1"):
            view = await relay.finished(run_id, within_s=60)
            view.assert_conformant()
            assert view.terminal["type"] == "RUN_ERROR"
            assert view.terminal["code"] == "worker_lost"
            assert view.types.count("RUN_STARTED") == 1

        # Both threads move on; the redelivered dispatches were not run again.
        after = await relay.run("scripted", first_input("t-long", "lg2"), within_s=30)
        assert after.outcome == {"type": "success"}
        # A consumer retrying the same answer (the history still shows the call without a
        # result, so the runtime takes the entry as its approval): the thread's ledger
        # holds the execution the lost run began, so it is not performed again.
        retry = await relay.run("approval", resume_input(asked, "ap3", approve), within_s=30)
        effects = [w["value"] for w in retry.wire
                   if w["type"] == "CUSTOM" and w["name"] == "agui-relay.effect"]
        assert effects == [{"key": interrupt["id"], "status": "outcome_unknown"}]
        assert retry.outcome == {"type": "success"}
        assert relay.runs["ap2"].types.count("RUN_STARTED") == 1
        assert relay.runs["lg1"].types.count("RUN_STARTED") == 1
        assert [x["interruptId"] for x in ledger_lines(ledger)] == [interrupt["id"]]
        assert second_worker.stop() == 0, second_worker.log_text()[-3000:]
    finally:
        first_worker.kill()
        second_worker.kill()


async def test_a_left_open_run_whose_records_cannot_fit_does_not_stop_the_worker(
        kafka: KafkaSettings, relay: Relay) -> None:
    # What an older version could leave: a 70,000-character thread id, over this worker's
    # 64 KiB as a key alone: neither its RUN_ERROR nor its closing checkpoint fits.
    huge = "t" * 70_000
    await lay_down(relay, huge, "r-huge", "scripted", [started(huge, "r-huge")])
    small = kafka.model_copy(update={"max_record_bytes": 65_536})
    async with in_process_worker(small) as worker:
        normal = await relay.run("scripted", first_input("t-after-huge",
                                                         script={"text": "served"}))
        assert normal.text() == "served"
        assert worker.failure is None
        assert relay.runs["r-huge"].types == ["RUN_STARTED"]


async def test_a_left_open_runs_record_with_a_superscript_sequence_does_not_stop_recovery(
        kafka: KafkaSettings, relay: Relay) -> None:
    """``'²'.isdigit()`` is True and ``int('²')`` raises: one foreign record of a dead
    worker's run with ``agui-seq: ²`` stopped every worker taking the partition over
    (found by probing). It is skipped like any other record that is no event of the run."""
    await lay_down(relay, "t-sup", "r-sup", "scripted", [])
    headers = [(k, "²".encode() if k == "agui-seq" else v)
               for k, v in EventHeaders("r-sup", "CUSTOM", "scripted", 0).encode()]
    await (await relay.producer.send(
        kafka.topics.events, orjson.dumps({"type": "CUSTOM", "name": "stray", "value": 1}),
        key=b"t-sup", headers=headers))
    async with in_process_worker(kafka) as worker:
        lost = await relay.finished("r-sup")
        assert worker.failure is None
    assert lost.terminal["code"] == "worker_lost"
    assert [r.key for r in relay.foreign] == [b"t-sup"]
