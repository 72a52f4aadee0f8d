"""Where a thread stands after a run's end (``catchup``) and the waits built on it.

``closed`` must give exactly what the gatekeeper's rules write for the same
end; ``Freshness`` is exercised over a real ``ThreadView`` and ``FanOut``
fed by hand (neither started): the paths that need no Kafka call.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import orjson
import pytest
from ag_ui.core import Interrupt

from contracts import OpenInterrupt, RunRequest, ThreadState, encode
from contracts.limits import InputLimits
from services.consumer.catchup import Ending, boundary, closed, passed
from services.consumer.freshness import Freshness
from services.consumer.metrics import ConsumerMetrics
from services.consumer.streams import FanOut
from services.consumer.threads import ThreadView
from services.gatekeeper.rules import Policy, on_boundary
from services.gatekeeper.thread import Boundary
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
LIMITS = InputLimits(max_id_length=256, max_json_depth=64)


def running(run_id: str = "r2", **extra: object) -> ThreadState:
    return ThreadState(thread_id="t1", status="running", agent="a", run_id=run_id,
                       recent_run_ids=["r1", run_id], **extra)  # type: ignore[arg-type]


def ending(event: dict[str, object], run_id: str = "r2") -> Ending:
    return Ending(run_id, str(event["type"]), "a", 7, orjson.dumps(event))


INTERRUPT = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r2",
             "outcome": {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "confirm"}]}}


def test_passed_means_the_run_is_known_and_not_the_one_running() -> None:
    assert not passed(None, "r2")
    assert not passed(running("r2"), "r2")
    assert passed(running("r2").model_copy(update={"status": "idle"}), "r2")
    assert passed(running("r3").model_copy(update={"recent_run_ids": ["r2", "r3"]}), "r2")
    assert not passed(ThreadState(thread_id="t1", status="idle", run_id="r1"), "r2")


def test_closed_is_what_the_gatekeepers_rules_write() -> None:
    state = running()
    derived = closed(state, ending(INTERRUPT), NOW, LIMITS)
    assert derived is not None
    assert derived.status == "interrupted"
    assert derived.interrupted_run_id == "r2"
    assert [o.interrupt.id for o in derived.open_interrupts] == ["i1"]
    boundary_ = boundary(ending(INTERRUPT), LIMITS)
    assert boundary_ is not None
    assert derived == on_boundary(state, boundary_, NOW, Policy())[0]
    failed = closed(state, ending({"type": "RUN_ERROR", "message": "x"}), NOW, LIMITS)
    assert failed is not None
    assert (failed.status, failed.updated_at) == ("idle", NOW)


def test_an_end_the_gatekeeper_cannot_read_changes_nothing_and_a_too_deep_one_fails() -> None:
    assert closed(running(), ending({"type": "RUN_FINISHED", "outcome": 3}), NOW, LIMITS) is None
    assert closed(running(), Ending("r2", "RUN_FINISHED", "a", 7, None), NOW, LIMITS) is None
    deep: object = "x"
    for _ in range(70):
        deep = [deep]
    too_deep = {**INTERRUPT, "outcome": {"type": "interrupt", "interrupts": [
        {"id": "i1", "reason": "confirm", "metadata": {"d": deep}}]}}
    found = boundary(ending(too_deep), LIMITS)
    assert found == Boundary("RUN_ERROR", "r2", "a")
    derived = closed(running(), ending(too_deep), NOW, LIMITS)
    assert derived is not None
    assert derived.status == "idle"
    assert not derived.open_interrupts


def test_a_queued_request_stays_queued_in_the_derived_state() -> None:
    queued = RunRequest.model_validate({
        "requestId": "q1", "agent": "a", "submittedAt": NOW.isoformat(),
        "input": {"threadId": "t1", "runId": "r3", "messages": [], "tools": [], "context": [],
                  "state": {}, "forwardedProps": {}}})
    derived = closed(running(queued=[queued]), ending({"type": "RUN_ERROR", "message": "x"}),
                     NOW, LIMITS)
    assert derived is not None
    assert derived.status == "idle"
    assert derived.queued == [queued]


def readers() -> tuple[ThreadView, FanOut]:
    kafka = KafkaSettings()
    return ThreadView(kafka), FanOut(kafka, ConsumerMetrics(), max_streams=4, stream_queue=16,
                                     index_size=8)


def put(threads: ThreadView, state: ThreadState) -> None:
    threads.apply(state.thread_id.encode(), encode(state))
    threads.progress.moved()


async def test_an_idle_thread_this_instance_saw_run_again_waits_for_the_view() -> None:
    threads, fanout = readers()
    before = ThreadState(thread_id="t1", status="interrupted", run_id="r1",
                         recent_run_ids=["r1"], open_interrupts=[
                             OpenInterrupt(run_id="r1", interrupt=Interrupt(id="i", reason="r"))])
    put(threads, before)
    fanout.admitted.put(("t1", "r2"), 1_796_284_800_000)
    fanout.ended.put(("t1", "r2"), ending({"type": "RUN_FINISHED"}))
    fanout.last_ended.put("t1", "r2")
    fresh = Freshness(threads, fanout, LIMITS, 5.0)
    after = ThreadState(thread_id="t1", status="idle", run_id="r2", recent_run_ids=["r1", "r2"])

    async def later() -> None:
        await asyncio.sleep(0.05)
        put(threads, running("r2"))
        await asyncio.sleep(0.05)
        put(threads, after)

    writer = asyncio.create_task(later())
    assert await fresh.settled("t1", before) == after
    await writer
    assert await Freshness(threads, fanout, LIMITS, 0).settled("t1", before) == before


async def test_a_run_never_seen_admitted_is_not_waited_for() -> None:
    threads, fanout = readers()
    idle = ThreadState(thread_id="t1", status="idle", run_id="r1", recent_run_ids=["r1"])
    put(threads, idle)
    fanout.ended.put(("t1", "rx"), ending({"type": "RUN_ERROR"}, "rx"))
    fanout.last_ended.put("t1", "rx")
    fresh = Freshness(threads, fanout, LIMITS, 30.0)
    assert await asyncio.wait_for(fresh.settled("t1", idle), 1.0) == idle
