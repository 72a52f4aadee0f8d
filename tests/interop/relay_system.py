"""The whole relay as child processes on the test broker, for interop tests.

``RelaySystem`` starts ``python -m services.gatekeeper``, one producer worker
(``python -m services.producer``) hosting the sample agents and the consumer
service (``python -m services.consumer``) on a free loopback port, each
logging JSON to a file, and stops them by their own pids (SIGTERM, then
SIGKILL) however the test ends. Ready means: the gatekeeper has its
partitions, the worker owns every dispatch topic's partitions, and
``/readyz`` answers 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

REPO = Path(__file__).resolve().parents[2]
SAMPLES = {
    "approval": "services.producer.agents.approval:agent",
    "scripted": "services.producer.agents.scripted:agent",
    "planner": "services.producer.agents.planner:agent",
}
AGENTS_ENV = ",".join(f"{name}={target}" for name, target in SAMPLES.items())
READY_S = 90.0
STOP_S = 20.0


@dataclass
class Child:
    """One service process."""

    module: str
    log_path: Path
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", self.module, cwd=REPO, env=self.env, stdout=log,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text("utf-8", "replace") if self.log_path.exists() else ""

    def check_alive(self) -> None:
        if self.process is not None and self.process.returncode is not None:
            raise AssertionError(f"{self.module} exited {self.process.returncode}:\n"
                                 f"{self.log()[-3000:]}")

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), STOP_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


@dataclass
class RelaySystem:
    """Gatekeeper, producer worker and consumer service on one topic prefix."""

    kafka: KafkaSettings
    url: str
    children: list[Child] = field(default_factory=list)

    def logs(self) -> str:
        return "\n".join(f"== {c.module}\n{c.log()[-4000:]}" for c in self.children)


def service_env(kafka: KafkaSettings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    env.update(KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
               AGUI_TOPIC_PREFIX=kafka.topic_prefix, AGUI_PARTITIONS=str(kafka.partitions),
               AGUI_AGENTS=AGENTS_ENV, AGUI_LOG_FORMAT="json", PYTHONUNBUFFERED="1",
               AGUI_GATEKEEPER_SESSION_TIMEOUT_MS="6000",
               AGUI_PRODUCER_SESSION_TIMEOUT_MS="6000", **extra)
    return env


@contextlib.asynccontextmanager
async def relay_system(bootstrap: str, log_dir: Path, *, partitions: int = 4,
                       **extra: str) -> AsyncIterator[RelaySystem]:
    """The three services on a fresh topic prefix, ready; stopped on the way out."""
    kafka = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=bootstrap,
                          AGUI_TOPIC_PREFIX=f"io{uuid.uuid4().hex[:10]}",
                          AGUI_PARTITIONS=partitions)
    await ensure_topics(kafka, tuple(SAMPLES))
    port = launcher.free_port()
    env = service_env(kafka, AGUI_HTTP_PORT=str(port), **extra)
    system = RelaySystem(kafka, f"http://127.0.0.1:{port}", [
        Child(module, log_dir / f"{module.rsplit('.', 1)[-1]}.log", env)
        for module in ("services.gatekeeper", "services.producer", "services.consumer")])
    try:
        for child in system.children:
            await child.start()
        await _until_ready(system)
        yield system
    finally:
        for child in system.children:
            await child.stop()


async def _until_ready(system: RelaySystem) -> None:
    gatekeeper, producer, _ = system.children
    async with httpx.AsyncClient(base_url=system.url, timeout=3.0) as http:
        async with asyncio.timeout(READY_S):
            while True:
                for child in system.children:
                    child.check_alive()
                ready = False
                with contextlib.suppress(httpx.HTTPError):
                    ready = (await http.get("/readyz")).status_code == 200
                if (ready and "assigned partitions" in gatekeeper.log()
                        and producer.log().count("own partitions") >= len(SAMPLES)):
                    return
                await asyncio.sleep(0.2)
