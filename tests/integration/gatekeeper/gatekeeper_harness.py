"""Driving a gatekeeper through real topics: write requests and events, read outputs.

``Topics`` plays every other party: a consumer service writing RunRequests,
a producer worker writing run events with their ``EventHeaders`` (run
boundaries to ``runs`` first, then everything to ``events``, as a worker
does: the gatekeeper reads only ``runs``), and an
independent reader of ``decisions``, ``dispatch.<agent>``, ``deadletter``
and ``threads`` with ``read_committed`` (only what a transaction committed is
ever seen). ``GatekeeperProcess`` runs ``python -m services.gatekeeper`` as a
child process that tests can SIGKILL, and always cleans it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from ag_ui.core import (
    BaseEvent,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    UserMessage,
)

from contracts import (
    DeadLetter,
    Decision,
    Dispatch,
    EventHeaders,
    RunRequest,
    ThreadState,
    decode,
    encode,
    encode_event,
)
from services.gatekeeper.partition import start_producer
from services.kafka.admin import ensure_topics
from services.kafka.clients import (
    AIOKafkaProducer,
    TopicPartition,
    new_admin,
    new_consumer,
    new_producer,
)
from services.producer.publish import publish_acknowledged
from services.runtime.settings import KafkaSettings

REPO_ROOT = Path(__file__).resolve().parents[3]
AGENTS = ("scripted", "approval")


def settings_for(bootstrap: str, prefix: str, partitions: int = 4) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix, partitions=partitions)


def run_request(
    request_id: str,
    thread_id: str,
    run_id: str,
    *,
    resume: Iterable[ResumeEntry] | None = None,
    agent: str = "scripted",
) -> RunRequest:
    return RunRequest(
        request_id=request_id,
        agent=agent,
        input=RunAgentInput(
            thread_id=thread_id,
            run_id=run_id,
            messages=[UserMessage(id=f"m-{run_id}", role="user", content="go")],
            resume=list(resume) if resume is not None else None,
        ),
        submitted_at=datetime.now(UTC),
    )


def resolved(*ids: str) -> list[ResumeEntry]:
    return [ResumeEntry(interrupt_id=i, status="resolved", payload={"approved": True}) for i in ids]


def cancelled(*ids: str) -> list[ResumeEntry]:
    return [ResumeEntry(interrupt_id=i, status="cancelled") for i in ids]


class Topics:
    """Writes as the other services would, and reads the gatekeeper's outputs."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.decisions: dict[str, list[Decision]] = defaultdict(list)
        self.dispatches: list[Dispatch] = []
        self.dead_letters: list[DeadLetter] = []
        self.threads: dict[str, ThreadState] = {}
        self.thread_writes: Counter[str] = Counter()
        """Records on ``threads`` per thread (the test's own included)."""
        self.decision_headers: dict[str, list[tuple[str, bytes]]] = {}
        self._seq = itertools.count()
        self._changed = asyncio.Event()
        self._producer = new_producer(settings, "test-writer", linger_ms=5)
        watched = [
            self.topics.decisions,
            self.topics.deadletter,
            self.topics.threads,
            *(self.topics.dispatch(a) for a in AGENTS),
        ]
        self._reader = new_consumer(settings, "test-checker", group_id=None, max_poll_records=5000)
        self._watched = [TopicPartition(t, p) for t in watched for p in range(settings.partitions)]
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Topics:
        await ensure_topics(self.settings, AGENTS)
        await self._producer.start()
        await self._reader.start()
        self._reader.assign(self._watched)
        await self._reader.seek_to_beginning(*self._watched)
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._producer.stop()
        await self._reader.stop()

    # -- writing -------------------------------------------------------------

    async def request(
        self,
        request: RunRequest,
        *,
        key: str | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Publish a RunRequest keyed by its thread (or by ``key``)."""
        await self.raw_request(encode(request), key or request.input.thread_id, headers)

    async def raw_request(
        self, value: bytes, key: str | None, headers: list[tuple[str, bytes]] | None = None
    ) -> None:
        await self._producer.send_and_wait(
            self.topics.requests,
            value,
            key=key.encode() if key is not None else None,
            headers=headers,
        )

    async def raw_thread_state(self, thread_id: str, value: bytes) -> None:
        """A thread state on ``threads``, as a gatekeeper committed it (keyed by the thread)."""
        await self._producer.send_and_wait(self.topics.threads, value, key=thread_id.encode())

    async def requests(self, requests: Iterable[RunRequest]) -> None:
        """Publish many requests at once (pipelined, in order per thread)."""
        sent = [
            await self._producer.send(
                self.topics.requests, encode(r), key=r.input.thread_id.encode()
            )
            for r in requests
        ]
        await asyncio.gather(*sent)

    async def finish_all(self, runs: Iterable[tuple[str, str]]) -> None:
        """RUN_FINISHED (success) for many (thread, run) pairs at once: on ``runs``, then,
        once all are acknowledged, on ``events``."""
        records = []
        for thread_id, run_id in runs:
            event = RunFinishedEvent(thread_id=thread_id, run_id=run_id)
            headers = EventHeaders(run_id, event.type.value, "scripted", next(self._seq))
            records.append((thread_id.encode(), encode_event(event), headers.encode()))
        for topic in (self.topics.runs, self.topics.events):
            sent = [await self._producer.send(topic, value, key=key, headers=headers)
                    for key, value, headers in records]
            await asyncio.gather(*sent)

    async def event(
        self, thread_id: str, run_id: str, event: BaseEvent, agent: str = "scripted"
    ) -> None:
        """Publish one AG-UI event as a producer worker would, with its headers."""
        headers = EventHeaders(run_id, event.type.value, agent, next(self._seq))
        await publish_acknowledged(self._producer, self.topics, thread_id, headers,
                                   encode_event(event))

    async def deltas(self, thread_id: str, run_id: str, count: int, text: str) -> None:
        """A streamed assistant message of ``count`` deltas (events the gatekeeper skips)."""
        events: list[BaseEvent] = [TextMessageStartEvent(message_id=f"m-{run_id}")]
        events += [TextMessageContentEvent(message_id=f"m-{run_id}", delta=text)] * count
        events.append(TextMessageEndEvent(message_id=f"m-{run_id}"))
        sent = []
        for event in events:
            headers = EventHeaders(run_id, event.type.value, "scripted", next(self._seq))
            sent.append(
                await self._producer.send(
                    self.topics.events,
                    encode_event(event),
                    key=thread_id.encode(),
                    headers=headers.encode(),
                )
            )
        await asyncio.gather(*sent)

    async def started(self, thread_id: str, run_id: str) -> None:
        await self.event(thread_id, run_id, RunStartedEvent(thread_id=thread_id, run_id=run_id))

    async def finished(self, thread_id: str, run_id: str, *interrupts: Interrupt) -> None:
        outcome = RunFinishedInterruptOutcome(interrupts=list(interrupts)) if interrupts else None
        await self.event(
            thread_id, run_id, RunFinishedEvent(thread_id=thread_id, run_id=run_id, outcome=outcome)
        )

    async def failed(self, thread_id: str, run_id: str) -> None:
        await self.event(thread_id, run_id, RunErrorEvent(message="boom", code="test"))

    # -- reading -------------------------------------------------------------

    async def _read(self) -> None:
        while True:
            got = await self._reader.getmany(timeout_ms=100)
            for tp, records in got.items():
                for record in records:
                    self._take(tp.topic, record)
            if got:
                self._changed.set()

    def _take(self, topic: str, record: Any) -> None:
        if topic == self.topics.decisions:
            d = decode(Decision, record.value)
            self.decisions[d.request_id].append(d)
            self.decision_headers[d.request_id] = list(record.headers or ())
        elif topic == self.topics.deadletter:
            self.dead_letters.append(decode(DeadLetter, record.value))
        elif topic == self.topics.threads:
            if record.value is None:  # a tombstone: the thread is forgotten
                self.threads.pop(record.key.decode(), None)
                return
            state = decode(ThreadState, record.value)
            self.threads[state.thread_id] = state
            self.thread_writes[state.thread_id] += 1
        else:
            self.dispatches.append(decode(Dispatch, record.value))

    async def until(self, check: Any, within: float = 30.0, what: str = "") -> None:
        """Wait until ``check()`` is true, or fail saying ``what`` was awaited."""
        deadline = time.monotonic() + within
        while not check():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out after {within} s waiting for {what or check}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))

    async def decision(self, request_id: str, within: float = 30.0) -> Decision:
        """The (first) decision on ``request_id``, waiting for it."""
        await self.until(lambda: self.decisions.get(request_id), within, f"decision {request_id}")
        return self.decisions[request_id][0]

    async def decide(self, request: RunRequest, within: float = 30.0) -> Decision:
        """Publish ``request`` and wait for its decision."""
        await self.request(request)
        return await self.decision(request.request_id, within)

    def dispatched(self, thread_id: str, run_id: str) -> list[Dispatch]:
        return [
            d for d in self.dispatches if (d.input.thread_id, d.input.run_id) == (thread_id, run_id)
        ]


class EchoWorker:
    """A stand-in producer worker: every run dispatched is finished with success at once."""

    def __init__(self, topics: Topics) -> None:
        self._topics = topics
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> EchoWorker:
        self._task = asyncio.create_task(self._work())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _work(self) -> None:
        seen = 0
        while True:
            await self._topics.until(lambda n=seen: len(self._topics.dispatches) > n, within=1e9)
            fresh = self._topics.dispatches[seen:]
            seen += len(fresh)
            await self._topics.finish_all((d.input.thread_id, d.input.run_id) for d in fresh)


def check_exactly_once(topics: Topics, expected: Iterable[RunRequest]) -> None:
    """The independent checker's verdict on what the topics hold.

    Every request has exactly one final decision (admitted or rejected),
    preceded by at most one ``queued``; nothing else was decided; and no run
    was dispatched twice.
    """
    wanted = {r.request_id for r in expected}
    assert set(topics.decisions) == wanted, "decisions for requests never sent, or missing"
    for request_id, decisions in topics.decisions.items():
        verdicts = [d.verdict for d in decisions]
        assert verdicts in (
            ["admitted"],
            ["rejected"],
            ["queued", "admitted"],
            ["queued", "rejected"],
        ), (request_id, verdicts)
    runs = Counter((d.input.thread_id, d.input.run_id) for d in topics.dispatches)
    duplicated = [run for run, n in runs.items() if n > 1]
    assert not duplicated, f"dispatched more than once: {sorted(duplicated)[:10]}"


async def check_after_a_second_wave(topics: Topics, first: list[RunRequest]) -> None:
    """``check_exactly_once`` once nothing of the first wave can still arrive.

    A second request on every first-wave thread is decided after anything the
    first wave could still bring (a decision again from rewound offsets, or
    from a zombie, precedes it on the thread's partition): once all are seen,
    the topics are complete. Nothing finished the first wave's runs, so every
    second request meets a busy thread.
    """
    again = [
        run_request(f"{r.request_id}-again", r.input.thread_id, f"{r.input.run_id}-again")
        for r in first
    ]
    await topics.requests(again)
    await topics.until(
        lambda: all(r.request_id in topics.decisions for r in again),
        within=60,
        what="the second wave's decisions",
    )
    check_exactly_once(topics, first + again)
    assert [topics.decisions[r.request_id][0].code for r in again] == ["thread_busy"] * len(again)


async def group_offsets(settings: KafkaSettings) -> dict[TopicPartition, int]:
    """The gatekeeper group's committed offsets, by topic partition."""
    admin = new_admin(settings)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(f"{settings.topic_prefix}.gatekeeper")
    finally:
        await admin.close()
    return {tp: o.offset for tp, o in found.items()}


def final_decisions(topics: Topics) -> int:
    return sum(1 for ds in topics.decisions.values() if ds[-1].verdict != "queued")


class GatekeeperProcess:
    """``python -m services.gatekeeper`` as a child process, logging JSON to a file."""

    def __init__(
        self,
        settings: KafkaSettings,
        log_dir: Path,
        name: str = "gk",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.log_path = log_dir / f"{name}.log"
        self.env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "AGUI_TOPIC_PREFIX": settings.topic_prefix,
            "AGUI_PARTITIONS": str(settings.partitions),
            "AGUI_LOG_FORMAT": "json",
            "AGUI_LOG_LEVEL": "INFO",
            "AGUI_GATEKEEPER_SESSION_TIMEOUT_MS": "6000",
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.gatekeeper"],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log_lines(self, since_start: bool = True) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        data = self.log_path.read_bytes()[self._log_offset if since_start else 0 :]
        out = []
        for line in data.splitlines():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                out.append({"msg": line.decode("utf-8", "replace")})
        return out

    def assignments(self, since_start: bool = True) -> list[str]:
        return [
            str(line["msg"])
            for line in self.log_lines(since_start)
            if str(line.get("msg", "")).startswith("assigned partitions")
        ]

    async def ready(self, within: float = 45.0) -> None:
        """Wait until this run of the process has partitions assigned and restored."""
        deadline = time.monotonic() + within
        while not self.assignments():
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"gatekeeper exited {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"gatekeeper not assigned after {within} s:\n{self.tail()}")
            await asyncio.sleep(0.1)

    def tail(self, n: int = 30) -> str:
        return "\n".join(str(line) for line in self.log_lines(False)[-n:])

    def kill(self) -> None:
        """SIGKILL: no transaction finishes, no group is left."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a graceful exit; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"gatekeeper ignored SIGTERM:\n{self.tail()}") from None
        return self.proc.returncode

    def cleanup(self) -> None:
        self.kill()


def successor_producers(monkeypatch: Any, another_id: Callable[[], bool]) -> None:
    """Gatekeepers started while ``another_id()`` holds use another transactional id.

    The id names the partitions an instance owns, so a successor taking over
    exactly what its predecessor owned would fence it; under another id
    (another prefix) only the group generation, or the broker's transaction
    timeout, can stop the predecessor's transaction.
    """

    async def start(
        settings: KafkaSettings, client_id: str, partitions: Any, *, retry: bool = False
    ) -> AIOKafkaProducer:
        if another_id():
            settings = settings.with_prefix(f"{settings.topic_prefix}.successor")
        return await start_producer(settings, client_id, partitions, retry=retry)

    for module in ("takeover", "commit"):  # taking partitions over, replacing a failed producer
        monkeypatch.setattr(f"services.gatekeeper.{module}.start_producer", start)
