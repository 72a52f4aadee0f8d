"""Writing thread states straight onto ``threads`` as the gatekeeper would, and running notifiers.

``Threads`` writes each thread's successive states in the contract's wire
form (``encode(ThreadState)``, keyed by threadId) with an idempotent
producer; ``NotifierProcess`` runs ``python -m services.notifier`` as a
child process that tests can SIGKILL, and always cleans it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from ag_ui.core import Interrupt

from contracts import DeadLetter, OpenInterrupt, RememberedDecision, ThreadState, decode, encode
from deploy.kafka.probe import free_port
from services.kafka.clients import AIOKafkaProducer, TopicPartition, new_consumer, new_producer
from services.notifier.service import Notifier
from services.notifier.settings import NotifierSettings
from services.runtime.settings import KafkaSettings

REPO_ROOT = Path(__file__).resolve().parents[3]
SECRET = "s3cret-never-logged"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Threads:
    """Writes thread states the way the gatekeeper's transactions leave them."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer = new_producer(settings, "notifier-test-writer")

    async def __aenter__(self) -> Threads:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    async def write(self, state: ThreadState) -> None:
        await self._producer.send_and_wait(self.settings.topics.threads, encode(state),
                                           key=state.thread_id.encode())

    async def interrupted(self, thread_id: str, run_id: str, *ids: str,
                          expires_at: datetime | None = None) -> ThreadState:
        state = ThreadState(
            thread_id=thread_id, status="interrupted", agent="approval", principal="acme",
            run_id=run_id, interrupted_run_id=run_id,
            open_interrupts=[OpenInterrupt(run_id=run_id, interrupt=Interrupt(
                id=i, reason="tool_approval", message=f"approve {i}?",
                expires_at=iso(expires_at) if expires_at else None)) for i in ids],
            updated_at=datetime.now(UTC))
        await self.write(state)
        return state

    async def resumed(self, thread_id: str, resume_run: str, *ids: str) -> ThreadState:
        now = datetime.now(UTC)
        decision = RememberedDecision(request_id=f"req-{resume_run}", run_id=resume_run,
                                      verdict="admitted", message="resumes",
                                      interrupt_ids=list(ids), principal="acme",
                                      key_name="alice", decided_at=now)
        state = ThreadState(thread_id=thread_id, status="running", agent="approval",
                            principal="acme", run_id=resume_run, recent_decisions=[decision],
                            run_started_at=now, updated_at=now)
        await self.write(state)
        return state


async def dead_letters(settings: KafkaSettings, count: int, within_s: float = 60.0
                       ) -> list[DeadLetter]:
    """The first ``count`` dead letters, read from the beginning."""
    consumer = new_consumer(settings, "notifier-test-deadletters", group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(settings.topics.deadletter, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        letters: list[DeadLetter] = []
        async with asyncio.timeout(within_s):
            while len(letters) < count:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    letters += [decode(DeadLetter, r.value) for r in records]
        return letters
    finally:
        await consumer.stop()


class NotifierProcess:
    """``python -m services.notifier`` in a child process (its log in ``log_path``)."""

    def __init__(self, settings: KafkaSettings, url: str, log_path: Path, **env: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "AGUI_TOPIC_PREFIX": settings.topic_prefix,
            "AGUI_PARTITIONS": str(settings.partitions),
            "AGUI_WEBHOOK_URL": url,
            "AGUI_WEBHOOK_SECRET": SECRET,
            "AGUI_HEALTH_PORT": str(self.port),
            "AGUI_LOG_FORMAT": "json",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> NotifierProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "services.notifier"],
                                         cwd=REPO_ROOT, env=self.env, stdout=log, stderr=log)
        return self

    async def ready(self, within_s: float = 60.0) -> None:
        deadline = time.monotonic() + within_s
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                assert self.proc is not None
                assert self.proc.poll() is None, self.log()
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"http://127.0.0.1:{self.port}/readyz")).status_code \
                            == 200:
                        return
                await asyncio.sleep(0.2)
        raise AssertionError(f"notifier not ready in {within_s} s:\n{self.log()}")

    async def metrics(self) -> str:
        async with httpx.AsyncClient() as client:
            return (await client.get(f"http://127.0.0.1:{self.port}/metrics")).text

    def kill(self, sig: int = signal.SIGKILL) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def soon(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


@contextlib.asynccontextmanager
async def running(kafka: KafkaSettings, url: str, **overrides: object
                  ) -> AsyncIterator[Notifier]:
    """A notifier in this event loop, ready (partitions restored); stopped on exit."""
    options: dict[str, object] = {"url": url, "secret": SECRET, "retries": 4, "backoff_s": 0.05,
                                  "timeout_s": 0.5, "poll_s": 0.2, **overrides}
    notifier = Notifier(kafka, NotifierSettings.model_validate(options))
    stop = asyncio.Event()
    task = asyncio.create_task(notifier.run(stop))
    try:
        async with asyncio.timeout(60):
            while not notifier.ready:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        yield notifier
    finally:
        stop.set()
        await task
