"""HTTP upstream agents over a real broker: an AG-UI service behind Kafka by one line.

The upstreams are the suite's own FastAPI services (``upstream_apps``) on
loopback ports; the worker hosts them as ``name=http://...`` entries of
``AGUI_AGENTS``. A well-behaved one streams text, a tool call and the 1.0
interrupt outcome, which the checkpoint keeps, then resumes and finishes;
each misbehaving one ends its run with one ``RUN_ERROR`` whose code names
the failure, the thread idle and the worker still serving. A worker
SIGKILLed while a stream is open leaves the run closed ``worker_lost``, and
the upstream is not called again for that dispatch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from ag_ui.core import ResumeEntry
from producer_harness import (
    Relay,
    RunView,
    WorkerProcess,
    first_input,
    in_process_worker,
    resume_input,
)
from upstream_apps import INTERRUPT, Upstream, serving

from deploy.kafka.probe import free_port
from services.kafka.admin import ensure_topics
from services.producer import checkpoint as cp
from services.producer.worker import Worker
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOKEN = "Bearer s3cret-upstream-token"
UP = {  # agent name: (path, settings)
    "up_good": ("good", {"HEADERS": f"Authorization: {TOKEN}; X-Tenant: acme"}),
    "up_unclosed": ("unclosed", {}),
    "up_problem": ("problem", {}),
    "up_unavailable": ("unavailable", {"RETRIES": "1"}),
    "up_json": ("json", {}),
    "up_garbage": ("garbage", {}),
    "up_invalid": ("invalid", {}),
    "up_drop": ("drop", {}),
    "up_huge": ("huge", {"MAX_EVENT_BYTES": "200000"}),
    "up_idle": ("idle", {"IDLE_TIMEOUT_S": "0.5"}),
    "up_endless": ("endless", {"IDLE_TIMEOUT_S": "5", "RUN_TIMEOUT_S": "1.5"}),
    "up_slow": ("endless", {}),
    "up_single": ("slow", {"CONCURRENCY": "1"}),
    "up_bomb": ("bomb", {}),
    "up_echo": ("echo", {"HEADERS": f"Authorization: {TOKEN}"}),
    "up_latin1": ("latin1", {}),
    "up_upper_case": ("upper_case", {}),
    "up_pinging": ("pinging", {"IDLE_TIMEOUT_S": "0.6"}),
    "up_dripping": ("dripping", {"IDLE_TIMEOUT_S": "0.6"}),
    "up_big_integer": ("big_integer", {}),
    "up_lf_crlf": ("lf_crlf", {"MAX_EVENT_BYTES": "20000"}),
}
UNREACHABLE = "up_gone"


def env_for(agent: str, settings: dict[str, str]) -> dict[str, str]:
    return {f"AGUI_UPSTREAM_{agent.upper()}_{k}": v for k, v in settings.items()}


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with serving() as seen:
        yield seen


@pytest.fixture
async def worker(kafka: KafkaSettings, upstream: Upstream,
                 monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Worker]:
    await ensure_topics(kafka, (*UP, UNREACHABLE))
    for agent, (_, settings) in UP.items():
        for key, value in env_for(agent, settings).items():
            monkeypatch.setenv(key, value)
    monkeypatch.setenv(f"AGUI_UPSTREAM_{UNREACHABLE.upper()}_RETRIES", "1")
    agents = ",".join([*(f"{a}={upstream.url(p)}" for a, (p, _) in UP.items()),
                       f"{UNREACHABLE}=http://127.0.0.1:{free_port()}/agui"])
    async with in_process_worker(kafka, agents) as running:
        yield running


def closed(worker: Worker, thread_id: str, run_id: str) -> Callable[[], bool]:
    def check() -> bool:
        state = worker.store.get(thread_id)
        return state is not None and cp.has_closed(state, run_id)
    return check


async def assert_idle(worker: Worker, thread_id: str, run_id: str) -> None:
    """The run's checkpoint is written (just after its terminal event): nothing open."""
    await wait_for(closed(worker, thread_id, run_id), 10, f"{run_id}'s checkpoint")
    state = worker.store.get(thread_id)
    assert state is not None
    assert state.active is None
    assert cp.open_interrupts(state) == []


def assert_one_run(view: RunView) -> None:
    view.assert_conformant()
    assert view.types.count("RUN_STARTED") == 1
    assert sum(view.types.count(t) for t in ("RUN_FINISHED", "RUN_ERROR")) == 1
    assert view.types[-1] in ("RUN_FINISHED", "RUN_ERROR")


async def test_a_well_behaved_upstream_interrupts_is_checkpointed_and_resumes(
        relay: Relay, worker: Worker, upstream: Upstream,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="services")
    asked = await relay.run("up_good", first_input("t-up-good", "g1"))
    assert_one_run(asked)
    assert asked.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                           "TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS",
                           "TOOL_CALL_END", "RUN_FINISHED"]
    assert asked.wire[0]["protocolVersion"] == "1.0"
    assert asked.outcome == {"type": "interrupt", "interrupts": [INTERRUPT]}
    await wait_for(closed(worker, "t-up-good", "g1"), 10, "g1's checkpoint")
    state = worker.store.get("t-up-good")
    assert state is not None
    assert [i.model_dump(mode="json", by_alias=True, exclude_none=True)
            for i in cp.open_interrupts(state)] == [INTERRUPT]

    (sent,) = upstream.bodies["good"]
    assert sent["protocolVersion"] == "1.0"
    assert (sent["threadId"], sent["runId"]) == ("t-up-good", "g1")
    (headers,) = upstream.headers["good"]
    assert headers["accept"] == "text/event-stream"
    assert headers["authorization"] == TOKEN
    assert headers["x-tenant"] == "acme"

    approve = [ResumeEntry(interrupt_id="approve-1", status="resolved",
                           payload={"approved": True})]
    done = await relay.run("up_good", resume_input(asked, "g2", approve))
    assert_one_run(done)
    assert done.outcome == {"type": "success"}
    assert done.text() == "approved=True"
    assert upstream.bodies["good"][1]["resume"][0]["interruptId"] == "approve-1"
    await assert_idle(worker, "t-up-good", "g2")
    assert TOKEN.split()[1] not in caplog.text


async def test_what_an_upstream_leaves_open_is_closed_before_its_finish(
        relay: Relay, worker: Worker) -> None:
    view = await relay.run("up_unclosed", first_input("t-up-open", "o1"))
    assert_one_run(view)
    assert view.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                          "TOOL_CALL_START", "TOOL_CALL_END", "TEXT_MESSAGE_END",
                          "RUN_FINISHED"]
    assert view.outcome == {"type": "success", "pendingToolCallIds": ["call-open"]}


async def test_an_event_stream_is_read_as_utf_8_whatever_charset_it_names(
        relay: Relay, worker: Worker) -> None:
    view = await relay.run("up_latin1", first_input("t-up-latin1", "l1"))
    assert_one_run(view)
    assert view.outcome == {"type": "success"}
    assert view.text() == "café ✓"


async def test_an_event_stream_named_in_any_case_is_an_event_stream(
        relay: Relay, worker: Worker) -> None:
    """``Text/Event-Stream`` passed the worker's check and failed httpx-sse's, which is
    case-sensitive: every run of such an upstream ended ``upstream_dropped``."""
    view = await relay.run("up_upper_case", first_input("t-up-case", "c1"))
    assert_one_run(view)
    assert view.outcome == {"type": "success"}
    assert view.text() == "any case"


async def test_keep_alive_comments_keep_an_upstream_thinking_past_its_idle_limit(
        relay: Relay, worker: Worker) -> None:
    """An upstream thinking for 1.5 s behind ``: keep-alive`` comments, with an idle limit
    of 0.6 s, was cut ``upstream_timeout``: the SSE parser drops comments, and only events
    reset the clock (found by probing). Every complete line does now; a line sent a byte
    at a time does not (``up_dripping``)."""
    view = await relay.run("up_pinging", first_input("t-up-ping", "p1"))
    assert_one_run(view)
    assert view.outcome["type"] == "interrupt"


async def test_events_ending_lf_then_a_crlf_blank_line_are_each_an_event(
        relay: Relay, worker: Worker) -> None:
    """300 KB of 1 KB events, each ended by ``\\n\\r\\n``, under a 20,000-byte event limit."""
    view = await relay.run("up_lf_crlf", first_input("t-up-eol", "e1"))
    assert_one_run(view)
    assert view.outcome == {"type": "success"}
    assert view.types.count("TEXT_MESSAGE_CONTENT") == 300


FAILURES = [  # agent, RUN_ERROR code, in its message, upstream calls for the one run
    ("up_problem", "upstream_status", "500: {", 1),
    ("up_unavailable", "upstream_status", "503", 2),
    (UNREACHABLE, "upstream_unreachable", "unreachable", 0),
    ("up_json", "upstream_protocol", "not text/event-stream", 1),
    ("up_garbage", "upstream_protocol", "not JSON", 1),
    ("up_invalid", "upstream_protocol", "invalid event", 1),
    ("up_big_integer", "upstream_protocol", "outside the 64-bit range", 1),
    ("up_drop", "upstream_dropped", "dropped the stream", 1),
    ("up_huge", "upstream_protocol", "an event over 200000 bytes", 1),
    ("up_idle", "upstream_timeout", "AGUI_UPSTREAM_IDLE_TIMEOUT_S", 1),
    ("up_dripping", "upstream_timeout", "AGUI_UPSTREAM_IDLE_TIMEOUT_S", 1),
    ("up_endless", "upstream_timeout", "AGUI_UPSTREAM_RUN_TIMEOUT_S", 1),
    ("up_bomb", "upstream_status", "500: (a gzip body, not read)", 1),
    ("up_echo", "upstream_status", '"authorization":"[redacted]"', 1),
]


@pytest.mark.parametrize(("agent", "code", "said", "calls"), FAILURES,
                         ids=[f[0] for f in FAILURES])
async def test_each_upstream_failure_ends_in_one_run_error_naming_it(
        relay: Relay, worker: Worker, upstream: Upstream, agent: str, code: str, said: str,
        calls: int) -> None:
    thread = f"t-{agent}"
    view = await relay.run(agent, first_input(thread, f"{agent}-1"), within_s=30)
    assert_one_run(view)
    assert view.terminal["code"] == code, view.terminal
    assert said in view.terminal["message"], view.terminal
    path = UP.get(agent, ("", {}))[0]
    assert upstream.calls(path) == calls if path else calls == 0
    if agent == "up_problem":
        assert "the ledger is down" in view.terminal["message"]
    assert TOKEN.split()[1] not in view.terminal["message"]
    await assert_idle(worker, thread, f"{agent}-1")
    # the worker goes on serving, the failed upstream's thread included
    after = await relay.run("up_good", first_input(thread, f"{agent}-2"))
    assert after.outcome["type"] == "interrupt"


async def test_a_cancel_aborts_the_upstream_request_and_ends_the_run_cancelled(
        relay: Relay, worker: Worker, upstream: Upstream) -> None:
    await relay.dispatch("up_slow", first_input("t-up-cancel", "c1"))
    await wait_for(lambda: "TEXT_MESSAGE_CONTENT" in getattr(relay.runs.get("c1"), "types", []),
                   20, "the upstream's stream")
    await relay.cancel("t-up-cancel", "c1")
    view = await relay.finished("c1", within_s=20)
    assert_one_run(view)
    assert view.outcome == {"type": "cancelled"}
    assert view.types[-2] == "TEXT_MESSAGE_END"
    await wait_for(lambda: "c1" in upstream.disconnected, 10, "the upstream to see the abort")
    await assert_idle(worker, "t-up-cancel", "c1")


async def test_requests_to_an_upstream_stay_within_its_concurrency(
        relay: Relay, worker: Worker, upstream: Upstream) -> None:
    inputs = [first_input(f"t-up-single-{n}", f"s{n}") for n in range(3)]
    await relay.dispatch("up_single", *inputs)
    for run_input in inputs:
        view = await relay.finished(run_input.run_id, within_s=30)
        assert_one_run(view)
        assert view.outcome["type"] == "interrupt"
    assert upstream.calls("slow") == 3
    assert upstream.most_in_flight == 1


async def wait_for(predicate: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_sigkilled_worker_closes_the_open_upstream_run_and_never_calls_it_again(
        kafka: KafkaSettings, relay: Relay, upstream: Upstream, tmp_path: Path) -> None:
    await ensure_topics(kafka, ("up_kill",))
    env = {"AGUI_AGENTS": f"up_kill={upstream.url('hang_once')}?key=s3cret-in-query",
           "AGUI_LOG_LEVEL": "DEBUG",
           "AGUI_UPSTREAM_UP_KILL_IDLE_TIMEOUT_S": "600",
           "AGUI_UPSTREAM_UP_KILL_HEADERS": f'{{"Authorization": "{TOKEN}"}}',
           "AGUI_PRODUCER_SESSION_TIMEOUT_MS": "6000"}
    first_worker = WorkerProcess(kafka, tmp_path / "worker-1.log", **env)
    second_worker = WorkerProcess(kafka, tmp_path / "worker-2.log", **env)
    try:
        first_worker.start()
        await relay.dispatch("up_kill", first_input("t-up-kill", "k1"))
        await wait_for(lambda: "TEXT_MESSAGE_START" in getattr(relay.runs.get("k1"), "types",
                                                               []), 60, "the open stream")
        assert upstream.calls("hang_once") == 1
        first_worker.kill()
        second_worker.start()

        view = await relay.finished("k1", within_s=60)
        assert_one_run(view)
        assert view.terminal["code"] == "worker_lost"
        # the thread moves on; the redelivered k1 dispatch (before k2 on its partition)
        # was skipped as closed: the upstream saw k1 once
        after = await relay.run("up_kill", first_input("t-up-kill", "k2"), within_s=30)
        assert after.outcome["type"] == "interrupt"
        assert [b["runId"] for b in upstream.bodies["hang_once"]] == ["k1", "k2"]
        assert second_worker.stop() == 0, second_worker.log_text()[-3000:]
        assert all(h["authorization"] == TOKEN for h in upstream.headers["hang_once"])
        assert "s3cret" not in first_worker.log_text() + second_worker.log_text()
    finally:
        first_worker.kill()
        second_worker.kill()
