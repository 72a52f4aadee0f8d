"""Helpers for the operator commands' tests: record writers and the CLI as a subprocess.

The tests play the other services' parts by writing their records into the
topics themselves (events with their headers, decisions, thread states,
dead letters) with the default partitioner, then run the CLI as a real
subprocess (``python -m services.cli.ops``) against the same broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
from ag_ui.core import Interrupt

from contracts import (
    DeadLetter,
    Decision,
    EventHeaders,
    OpenInterrupt,
    ThreadState,
    encode,
)
from contracts.topics import BOUNDARY_TYPES
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.kafka.clients import AIOKafkaProducer
from services.kafka.reader import Start, TopicReader
from services.runtime.settings import KafkaSettings

REPO = Path(__file__).resolve().parents[3]
PARTITIONS = 4
CLI_TIMEOUT_S = 60.0


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[Any]:
        return [orjson.loads(line) for line in self.stdout.splitlines() if line.strip()]


def cli_env(settings: KafkaSettings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    env.update(KAFKA_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
               AGUI_TOPIC_PREFIX=settings.topic_prefix, AGUI_PARTITIONS=str(settings.partitions),
               COLUMNS="200", NO_COLOR="1", PYTHONUNBUFFERED="1")
    env.update(extra)  # a test may narrow COLUMNS
    return env


async def run_cli(settings: KafkaSettings, *args: str, within_s: float = CLI_TIMEOUT_S,
                  **env: str) -> CliResult:
    """``python -m services.cli.ops ARGS`` to completion."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.ops", *args, cwd=REPO, env=cli_env(settings, **env),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), within_s)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return CliResult(process.returncode, out.decode(), err.decode())


@contextlib.asynccontextmanager
async def cli_process(settings: KafkaSettings, *args: str, **env: str
                      ) -> AsyncIterator[asyncio.subprocess.Process]:
    """A long-running CLI process (e.g. ``tail`` following), killed if still alive after."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.ops", *args, cwd=REPO, env=cli_env(settings, **env),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        yield process
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
            await process.wait()


async def read_line(stream: asyncio.StreamReader | None, within_s: float = 30.0) -> str:
    assert stream is not None
    line = await asyncio.wait_for(stream.readline(), within_s)
    assert line, "stream closed before a line arrived"
    return line.decode()


class Writer:
    """Plays gatekeeper and producer: writes their records with the default partitioner."""

    def __init__(self, settings: KafkaSettings, producer: AIOKafkaProducer) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.producer = producer
        self.seq: dict[str, int] = {}

    async def send(self, topic: str, key: str | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes]] = (),
                   timestamp_ms: int | None = None) -> tuple[int, int]:
        meta = await self.producer.send_and_wait(
            topic, value, key=key.encode() if key is not None else None,
            headers=list(headers) or None, timestamp_ms=timestamp_ms)
        return int(meta.partition), int(meta.offset)

    async def event(self, thread: str, run: str, body: dict[str, Any], agent: str = "scripted",
                    timestamp_ms: int | None = None, seq: int | None = None) -> tuple[int, int]:
        number = self.seq.get(run, 0) if seq is None else seq
        self.seq[run] = number + 1
        headers = EventHeaders(run, body["type"], agent, number).encode()
        if body["type"] in BOUNDARY_TYPES:  # a worker writes its boundaries to runs first
            await self.send(self.topics.runs, thread, orjson.dumps(body), headers, timestamp_ms)
        return await self.send(self.topics.events, thread, orjson.dumps(body), headers,
                               timestamp_ms)

    async def run(self, thread: str, run: str, *, agent: str = "scripted",
                  text: str | None = None, interrupts: Sequence[Interrupt] = (),
                  input_extra: dict[str, Any] | None = None) -> None:
        """A whole run: RUN_STARTED (echoing its input), optional text, RUN_FINISHED."""
        given = {"threadId": thread, "runId": run, "messages": [], **(input_extra or {})}
        await self.event(thread, run, {"type": "RUN_STARTED", "threadId": thread, "runId": run,
                                       "protocolVersion": "1.0", "input": given}, agent)
        if text is not None:
            mid = f"{run}-m"
            await self.event(thread, run, {"type": "TEXT_MESSAGE_START", "messageId": mid,
                                           "role": "assistant"}, agent)
            await self.event(thread, run, {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid,
                                           "delta": text}, agent)
            await self.event(thread, run, {"type": "TEXT_MESSAGE_END", "messageId": mid}, agent)
        finished: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": thread, "runId": run}
        if interrupts:
            finished["outcome"] = {"type": "interrupt", "interrupts": [
                i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in interrupts]}
        await self.event(thread, run, finished, agent)

    async def state(self, state: ThreadState) -> tuple[int, int]:
        return await self.send(self.topics.threads, state.thread_id, encode(state))

    async def interrupted(self, thread: str, run: str, interrupts: Sequence[Interrupt],
                          agent: str = "scripted") -> ThreadState:
        state = ThreadState(thread_id=thread, status="interrupted", agent=agent, run_id=run,
                            interrupted_run_id=run, recent_run_ids=[run],
                            open_interrupts=[OpenInterrupt(run_id=run, interrupt=i)
                                             for i in interrupts],
                            updated_at=datetime.now(UTC))
        await self.state(state)
        return state

    async def decision(self, thread: str, request_id: str, verdict: str, *,
                       run: str | None = None, code: str | None = None, message: str = "ok",
                       interrupt_ids: list[str] | None = None, agent: str = "scripted"
                       ) -> tuple[int, int]:
        decision = Decision(request_id=request_id, thread_id=thread, run_id=run, agent=agent,
                            verdict=verdict, code=code, message=message,  # type: ignore[arg-type]
                            interrupt_ids=interrupt_ids, decided_at=datetime.now(UTC))
        return await self.send(self.topics.decisions, thread, encode(decision))

    async def deadletter(self, key: str | None, value: str, reason: str, code: str
                         ) -> tuple[int, int]:
        letter = DeadLetter(source_topic=self.topics.requests, partition=1, offset=42, key=key,
                            value=value, reason=reason, code=code, service="gatekeeper",
                            headers={"x-test": "1"}, failed_at=datetime.now(UTC))
        return await self.send(self.topics.deadletter, key, encode(letter))


async def wait_for_records(settings: KafkaSettings, topic: str, key: str, count: int = 1,
                           within_s: float = 30.0) -> list[Any]:
    """The first ``count`` records keyed ``key`` on ``topic`` (as ConsumerRecords)."""
    found: list[Any] = []
    async with TopicReader(settings, "ops-test-wait") as reader:
        await reader.assign([await reader.key_partition(topic, key)], Start.beginning())
        async with asyncio.timeout(within_s):
            async for batch in reader.batches():
                found += [r for r in batch if r.key == key.encode()]
                if len(found) >= count:
                    return found[:count]
    raise AssertionError("unreachable")


async def end_offset_total(settings: KafkaSettings, topic: str) -> int:
    """How many records ``topic`` holds (sum of end offsets; nothing is ever deleted here)."""
    async with TopicReader(settings, "ops-test-ends") as reader:
        return sum((await reader.end_offsets(await reader.all_partitions(topic))).values())


class Service:
    """``python -m MODULE`` (a relay service) as a child process logging JSON to a file."""

    def __init__(self, module: str, settings: KafkaSettings, log_dir: Path,
                 **env: str) -> None:
        self.module = module
        self.log_path = log_dir / f"{module.replace('.', '_')}.log"
        self.env = {**cli_env(settings), "AGUI_LOG_FORMAT": "json", "AGUI_LOG_LEVEL": "INFO",
                    "AGUI_GATEKEEPER_SESSION_TIMEOUT_MS": "6000", **env}
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> Service:
        log = self.log_path.open("ab")
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", self.module, cwd=REPO, env=self.env, stdout=log,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text("utf-8", "replace") if self.log_path.exists() else ""

    async def wait_for_log(self, needle: str, within_s: float = 60.0) -> None:
        """Until ``needle`` appears in the log; fails with the log tail if the process dies."""
        deadline = asyncio.get_running_loop().time() + within_s
        while needle not in self.log():
            if self.process is not None and self.process.returncode is not None:
                raise AssertionError(f"{self.module} exited {self.process.returncode}:\n"
                                     f"{self.log()[-3000:]}")
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{self.module}: no {needle!r} after {within_s}s:\n"
                                     f"{self.log()[-3000:]}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), 20)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


@contextlib.asynccontextmanager
async def services(*started: Service) -> AsyncIterator[tuple[Service, ...]]:
    """Start services; always stop them (by their own pids) on the way out."""
    try:
        for service in started:
            await service.start()
        yield started
    finally:
        for service in started:
            await service.stop()


async def wait_ready(url: str, consumer: Service) -> None:
    """Until the consumer service at ``url`` answers ``/readyz`` 200 (about a minute)."""
    async with httpx.AsyncClient(base_url=url, timeout=5.0) as client:
        for _ in range(300):
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError("consumer service never ready:\n" + consumer.log()[-3000:])


@contextlib.asynccontextmanager
async def one_worker_system(settings: KafkaSettings, tmp_path: Path, agents: str,
                            agents_path: Path) -> AsyncIterator[str]:
    """A gatekeeper, one worker hosting ``agents`` (modules under ``agents_path``) and the
    consumer service, all ready: the consumer's URL."""
    port = launcher.free_port()
    (tmp_path / "w").mkdir()
    started = (
        Service("services.gatekeeper", settings, tmp_path),
        Service("services.producer", settings, tmp_path / "w", AGUI_AGENTS=agents,
                PYTHONPATH=str(agents_path)),
        Service("services.consumer", settings, tmp_path, AGUI_AGENTS=agents,
                AGUI_HTTP_PORT=str(port)),
    )
    async with services(*started):
        url = f"http://127.0.0.1:{port}"
        await wait_ready(url, started[-1])
        await started[0].wait_for_log("assigned partitions")
        yield url


PIPELINE_PARENT = "pipeline_parent=services.producer.agents.pipeline_parent:agent"
PIPELINE_CHILD = "pipeline_child=services.producer.agents.pipeline_child:agent"


@contextlib.asynccontextmanager
async def pipeline_system(settings: KafkaSettings, tmp_path: Path, **gatekeeper_env: str
                          ) -> AsyncIterator[str]:
    """A gatekeeper, a worker for ``pipeline_parent``, one for ``pipeline_child`` and the
    consumer service, all ready (topics created): the consumer's URL."""
    await ensure_topics(settings, ("pipeline_parent", "pipeline_child"))
    port = launcher.free_port()
    for sub in ("parent", "child"):
        (tmp_path / sub).mkdir()
    started = (
        Service("services.gatekeeper", settings, tmp_path, **gatekeeper_env),
        Service("services.producer", settings, tmp_path / "parent",
                AGUI_AGENTS=PIPELINE_PARENT),
        Service("services.producer", settings, tmp_path / "child", AGUI_AGENTS=PIPELINE_CHILD),
        Service("services.consumer", settings, tmp_path,
                AGUI_AGENTS=f"{PIPELINE_PARENT},{PIPELINE_CHILD}", AGUI_HTTP_PORT=str(port)),
    )
    async with services(*started):
        url = f"http://127.0.0.1:{port}"
        await wait_ready(url, started[-1])
        await started[0].wait_for_log("assigned partitions")
        yield url

