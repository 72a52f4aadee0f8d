"""Helpers for the producer's broker tests: the gatekeeper's and a consumer's parts.

``Relay`` writes ``Dispatch`` records straight onto ``dispatch.<agent>`` and
``ControlCommand`` records onto ``control`` (what the gatekeeper and the
consumer service would do), and follows ``events`` to hand back each run's
records once its terminal event arrived. ``in_process_worker`` runs a
``Worker`` in the test's loop; ``WorkerProcess`` runs ``python -m
services.producer`` as a subprocess, stopped only by its own pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from ag_ui.core import ResumeEntry, RunAgentInput, UserMessage
from ag_ui_validate.pytest_plugin import validate_agui

from contracts import ControlCommand, Dispatch, EventHeaders, Handover, encode
from services.agui.transcript import replay
from services.kafka.admin import ensure_topics
from services.kafka.clients import ConsumerRecord, new_producer
from services.kafka.reader import Start, TopicReader
from services.producer import checkpoint as cp
from services.producer.agent import load_agents, parse_agents
from services.producer.settings import ProducerSettings
from services.producer.worker import Worker
from services.runtime.settings import KafkaSettings

REPO_ROOT = Path(__file__).resolve().parents[3]
TERMINALS = ("RUN_FINISHED", "RUN_ERROR")


@dataclass
class RunView:
    """One run's records as they sit on ``events``, in partition order."""

    run_id: str
    records: list[ConsumerRecord[bytes, bytes]] = field(default_factory=list)

    @property
    def headers(self) -> list[EventHeaders]:
        out = [EventHeaders.decode(r.headers) for r in self.records]
        assert all(h is not None for h in out)
        return [h for h in out if h is not None]

    @property
    def wire(self) -> list[dict[str, Any]]:
        return [orjson.loads(r.value) for r in self.records]

    @property
    def types(self) -> list[str]:
        return [w["type"] for w in self.wire]

    @property
    def terminal(self) -> dict[str, Any]:
        return self.wire[-1]

    @property
    def outcome(self) -> dict[str, Any]:
        assert self.terminal["type"] == "RUN_FINISHED", self.terminal
        return dict(self.terminal.get("outcome", {"type": "success"}))

    def text(self) -> str:
        return "".join(w["delta"] for w in self.wire if w["type"] == "TEXT_MESSAGE_CONTENT")

    def assert_conformant(self, *, waived: Sequence[str] = ()) -> None:
        """Headers numbered 0..n-1 in partition order, one terminal, ag-ui-validate clean
        but for the ``waived`` rules (an upstream's known finding, named by its caller)."""
        assert [h.seq for h in self.headers] == list(range(len(self.records)))
        assert {h.run_id for h in self.headers} == {self.run_id}
        assert [h.event_type for h in self.headers] == self.types
        assert sum(t in TERMINALS for t in self.types) == 1
        assert self.types[-1] in TERMINALS
        overrides = dict.fromkeys(waived, "off")
        if self.types[0] == "RUN_ERROR":
            overrides["AGUI001"] = "off"
        report = validate_agui([r.value.decode() for r in self.records],
                               severity_overrides=overrides or None)
        findings = [(d.rule, d.message) for d in report.diagnostics if d.severity != "info"]
        assert not findings, findings


def first_input(thread_id: str, run_id: str | None = None, **props: Any) -> RunAgentInput:
    return RunAgentInput(thread_id=thread_id, run_id=run_id or f"run-{uuid.uuid4().hex[:8]}",
                         messages=[UserMessage(id=f"u-{thread_id}", content="hello")],
                         forwarded_props=props or None)


def resume_input(previous: RunView, run_id: str, resume: Sequence[ResumeEntry],
                 **props: Any) -> RunAgentInput:
    """What a consumer sends next: the history ``previous`` left, plus ``resume``."""
    fields = replay(previous.wire).input_fields()
    if props:
        fields["forwardedProps"] = props
    return RunAgentInput.model_validate({
        **fields, "threadId": previous.wire[0]["threadId"], "runId": run_id,
        "resume": [e.model_dump(mode="json", by_alias=True) for e in resume]})


class Relay:
    """Plays the gatekeeper (dispatches) and a consumer (cancels, reading events)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.producer = new_producer(settings, "producer-test-relay")
        self.runs: dict[str, RunView] = {}
        self.ended: dict[str, asyncio.Event] = {}
        self.order: list[ConsumerRecord[bytes, bytes]] = []
        self.foreign: list[ConsumerRecord[bytes, bytes]] = []
        """Records on ``events`` without the relay's headers (a test's stray ones)."""
        self._stop = asyncio.Event()
        self._follower: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Relay:
        await self.producer.start()
        reader = TopicReader(self.settings, "producer-test-follower")
        await reader.__aenter__()
        await reader.assign(await reader.all_partitions(self.settings.topics.events),
                            Start.beginning())
        self._follower = asyncio.create_task(self._follow(reader))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._follower is not None:
            await self._follower
        await self.producer.stop()

    async def _follow(self, reader: TopicReader) -> None:
        try:
            async for batch in reader.batches(stop=self._stop, poll_ms=100):
                batch.sort(key=lambda r: (r.partition, r.offset))
                for record in batch:
                    headers = EventHeaders.decode(record.headers)
                    if headers is None:  # another writer's, as a test may put there
                        self.foreign.append(record)
                        continue
                    self.order.append(record)
                    view = self.runs.setdefault(headers.run_id, RunView(headers.run_id))
                    view.records.append(record)
                    if headers.event_type in TERMINALS:
                        self.ended.setdefault(headers.run_id, asyncio.Event()).set()
        finally:
            await reader.__aexit__(None, None, None)

    async def dispatch(self, agent: str, *inputs: RunAgentInput,
                       warnings: list[str] | None = None,
                       handover: Handover | None = None) -> None:
        """Write one Dispatch per input (in this order) and wait until all are durable."""
        now = datetime.now(UTC)
        pending = []
        for run_input in inputs:
            record = Dispatch(request_id=f"req-{run_input.run_id}"[:200], agent=agent,
                              input=run_input, submitted_at=now, decided_at=now,
                              warnings=warnings, handover=handover)
            pending.append(await self.producer.send(self.settings.topics.dispatch(agent),
                                                    encode(record),
                                                    key=run_input.thread_id.encode()))
        await asyncio.gather(*pending)

    async def cancel(self, thread_id: str, run_id: str) -> None:
        command = ControlCommand(thread_id=thread_id, run_id=run_id, requested_by="test",
                                 requested_at=datetime.now(UTC))
        await (await self.producer.send(self.settings.topics.control, encode(command),
                                        key=thread_id.encode()))

    async def started(self, run_id: str, within_s: float = 30.0) -> None:
        """Wait until the run's first record is on ``events``."""
        deadline = time.monotonic() + within_s
        while run_id not in self.runs:
            assert time.monotonic() < deadline, f"run {run_id} never started"
            await asyncio.sleep(0.05)

    async def finished(self, run_id: str, within_s: float = 30.0) -> RunView:
        """Wait for the run's terminal event; returns all its records."""
        event = self.ended.setdefault(run_id, asyncio.Event())
        await asyncio.wait_for(event.wait(), within_s)
        return self.runs[run_id]

    async def run(self, agent: str, run_input: RunAgentInput, within_s: float = 30.0) -> RunView:
        await self.dispatch(agent, run_input)
        return await self.finished(run_input.run_id, within_s)


async def still_serves(relay: Relay, worker: Worker, thread_id: str) -> None:
    """A normal run on ``thread_id`` is served: the worker went on after a hostile one."""
    normal = await relay.run("scripted", first_input(thread_id, script={"text": "still here"}))
    normal.assert_conformant()
    assert normal.text() == "still here"
    assert normal.outcome == {"type": "success"}
    assert worker.failure is None
    assert worker.ready


async def checkpointed(worker: Worker, thread_id: str, run_id: str) -> cp.ThreadCheckpoint:
    """The worker's checkpoint of ``thread_id`` once it has closed ``run_id``."""
    deadline = time.monotonic() + 10
    while True:
        state = worker.store.get(thread_id)
        if state is not None and cp.has_closed(state, run_id):
            return state
        assert time.monotonic() < deadline, f"{run_id} never checkpointed"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def in_process_worker(settings: KafkaSettings, agents: str = "approval,scripted,planner",
                            **env: Any) -> AsyncIterator[Worker]:
    """A worker in this event loop, ready once it owns its partitions."""
    producer_settings = ProducerSettings.model_validate({"AGUI_AGENTS": agents, **env})
    worker = Worker(settings, producer_settings, load_agents(agents))
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        deadline = time.monotonic() + 60
        while not (worker.hosts and all(h.ready.is_set() for h in worker.hosts)):
            assert not task.done(), task.exception()
            assert time.monotonic() < deadline, "worker never got its partitions"
            await asyncio.sleep(0.05)
        yield worker
    finally:
        stop.set()
        await task


@contextlib.asynccontextmanager
async def hosting(settings: KafkaSettings, agents: str) -> AsyncIterator[Worker]:
    """``in_process_worker`` for ``agents`` (``name=module:object,...``), topics created."""
    await ensure_topics(settings, tuple(parse_agents(agents)))
    async with in_process_worker(settings, agents) as worker:
        yield worker


class WorkerProcess:
    """``python -m services.producer`` with its log in a file; killed only by its pid."""

    def __init__(self, settings: KafkaSettings, log_path: Path, **env: str) -> None:
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("KAFKA_", "AGUI_"))}
        self.env |= {"KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
                     "AGUI_TOPIC_PREFIX": settings.topic_prefix,
                     "AGUI_PARTITIONS": str(settings.partitions), "AGUI_LOG_FORMAT": "json",
                     "PYTHONUNBUFFERED": "1", **env}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "services.producer"],
                                         cwd=REPO_ROOT, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        """SIGKILL: the fault under test."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
