"""A whole agui-relay deployment as child processes, for the fault scenarios.

``Stack`` creates the topics of a private prefix on a real broker, starts
the gatekeeper(s), producer worker(s) hosting the ``approval`` and
``scripted`` sample agents, and consumer-service instance(s), each as
``python -m services.<service>`` with its environment (``KafkaSettings``
variables, the service's own), and waits until the deployment serves: each
consumer instance answers ``/readyz`` and a probe run goes end to end
through the topics. Scenarios SIGKILL and restart instances through it;
leaving the ``async with`` stops every process it started (SIGTERM, then
SIGKILL), whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from deploy.kafka import launcher
from faults.checker import Execution
from faults.follower import Follower
from faults.load import KafkaLoad, new_ids, run_input
from faults.procs import ServiceDiedError, ServiceProcess
from faults.snapshot import read_ledger
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

T = TypeVar("T")
AGENTS = ("approval", "scripted")
AGENT_SPECS = ("approval=services.producer.agents.approval:agent,"
               "scripted=services.producer.agents.scripted:agent")
MODULES = {"gatekeeper": "services.gatekeeper", "producer": "services.producer",
           "consumer": "services.consumer"}


@dataclass
class StackConfig:
    """How many instances of each service, and extra environment for all or one role."""

    partitions: int = 4
    gatekeepers: int = 1
    producers: int = 1
    consumers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    role_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per role; ``{index}`` in a value becomes the instance's number (a directory each)."""


def _clean_environ() -> dict[str, str]:
    """The parent's environment without any Kafka or agui-relay setting."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("KAFKA_", "AGUI_"))}


class Stack:
    """Topics and service processes of one deployment under a private topic prefix."""

    def __init__(self, bootstrap: str, prefix: str, workdir: Path,
                 config: StackConfig | None = None) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.config = config or StackConfig()
        self.workdir = workdir
        self.ledger = workdir / f"{prefix}-approvals.jsonl"
        """Where the ``approval`` agent records each execution (AGUI_APPROVAL_LEDGER)."""
        self.settings = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix,
                                      partitions=self.config.partitions)
        self.services: dict[str, list[ServiceProcess]] = {r: [] for r in MODULES}
        counts = {"gatekeeper": self.config.gatekeepers, "producer": self.config.producers,
                  "consumer": self.config.consumers}
        for role, n in counts.items():
            for i in range(n):
                self.services[role].append(self._service(role, i))

    def _service(self, role: str, index: int) -> ServiceProcess:
        env = {
            **_clean_environ(),
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "AGUI_TOPIC_PREFIX": self.prefix,
            "AGUI_PARTITIONS": str(self.config.partitions),
            "AGUI_AGENTS": AGENT_SPECS,
            "AGUI_LOG_FORMAT": "text",
            "AGUI_GATEKEEPER_SESSION_TIMEOUT_MS": "6000",
            "AGUI_PRODUCER_SESSION_TIMEOUT_MS": "6000",
            "AGUI_APPROVAL_LEDGER": str(self.ledger),
            "PYTHONUNBUFFERED": "1",
            **self.config.env,
            **{k: v.replace("{index}", str(index))
               for k, v in self.config.role_env.get(role, {}).items()},
        }
        health = None
        if role == "consumer":
            port = launcher.free_port()
            env |= {"AGUI_HTTP_HOST": "127.0.0.1", "AGUI_HTTP_PORT": str(port)}
            health = f"http://127.0.0.1:{port}"
        return ServiceProcess(f"{role}-{index}", MODULES[role], env, self.workdir, health)

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Stack:
        try:
            await ensure_topics(self.settings, AGENTS)
            for proc in self.all():
                proc.start()
            await self.ready()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop every process this stack started (SIGTERM, then SIGKILL)."""
        await asyncio.gather(*(asyncio.to_thread(p.stop, 10.0) for p in self.all()),
                             return_exceptions=True)

    def all(self) -> list[ServiceProcess]:
        return [p for procs in self.services.values() for p in procs]

    @property
    def consumer_urls(self) -> list[str]:
        return [p.health_url for p in self.services["consumer"] if p.health_url]

    async def ready(self, timeout_s: float = 90.0) -> float:
        """Wait until every consumer answers /readyz and a probe run ends; seconds taken."""
        started = time.monotonic()
        deadline = started + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            for proc in self.services["consumer"]:
                await self._http_ready(client, proc, deadline)
        await self.probe(max(deadline - time.monotonic(), 1.0))
        return time.monotonic() - started

    async def _http_ready(self, client: httpx.AsyncClient, proc: ServiceProcess,
                          deadline: float) -> None:
        while True:
            proc.check_alive()
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{proc.health_url}/readyz")).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{proc.name} not ready:\n{proc.log_tail()}")
            await asyncio.sleep(0.2)

    async def probe(self, timeout_s: float = 60.0) -> float:
        """One run of ``scripted`` end to end through the topics; seconds it took.

        Fails at once, with the log tail, if a service process exits meanwhile.
        """
        started = time.monotonic()
        async with Follower(self.settings) as follower, KafkaLoad(
                self.settings, follower, resend_s=3.0, step_s=timeout_s) as load:
            thread_id, run_id, _ = new_ids("probe", 0)
            admitted, ending = await self.watching(
                load.step("scripted", run_input(thread_id, run_id)))
        if not admitted or ending is None:
            raise TimeoutError(
                f"probe run not admitted and finished within {timeout_s:.0f} s "
                f"(admitted={admitted}); {load.stats.line()}\n{self.logs()}")
        return time.monotonic() - started

    async def watching(self, work: Awaitable[T]) -> T:
        """``work``'s result; ``ServiceDiedError`` as soon as a service process exits."""
        task = asyncio.ensure_future(work)
        try:
            while not task.done():
                self.check_alive()
                await asyncio.wait([task], timeout=0.5)
            return task.result()
        finally:
            task.cancel()

    def logs(self, lines: int = 15) -> str:
        """The last lines of every service's log, for failure messages."""
        return "\n".join(f"--- {p.name} (pid {p.pid}, alive {p.alive()})\n{p.log_tail(lines)}"
                         for p in self.all())

    # -- faults --------------------------------------------------------------

    def kill(self, role: str, index: int = 0) -> ServiceProcess:
        proc = self.services[role][index]
        proc.kill()
        return proc

    def restart(self, role: str, index: int = 0) -> ServiceProcess:
        proc = self.services[role][index]
        proc.start()
        return proc

    def rss_kib(self) -> dict[str, int]:
        """Resident memory of every running service, by name."""
        out: dict[str, int] = {}
        for p in self.all():
            rss = p.rss_kib()
            if rss is not None:
                out[p.name] = rss
        return out

    def executions(self) -> list[Execution]:
        """The approved side effects performed so far (from the approval ledger)."""
        return read_ledger(self.ledger)

    def check_alive(self) -> None:
        for p in self.all():
            p.check_alive()


def unique_prefix(tag: str) -> str:
    return f"f{tag}{uuid.uuid4().hex[:8]}"


def growth_mib(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, float]:
    """RSS growth per service in MiB (services present in both samples)."""
    return {k: round((after[k] - before[k]) / 1024, 1) for k in before if k in after}


__all__ = ["AGENTS", "ServiceDiedError", "Stack", "StackConfig", "growth_mib", "unique_prefix"]
