"""The three services as child processes, watched the way an operator watches them.

``ObservedStack`` starts the gatekeeper, a producer worker (the ``scripted``
agent) and a consumer-service instance with ``python -m services.<name>``,
each with its health port (the consumer on its HTTP port) and its stderr in
a file of its own, then waits until every ``/readyz`` answers 200. Nothing
sets ``AGUI_LOG_FORMAT``: stderr is a file, not a terminal, so the services
must choose JSON by themselves. Leaving the block stops every process it
started by its pid (SIGTERM, then SIGKILL: the fault suite's ``ServiceProcess``),
whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from deploy.kafka import launcher
from tests.faults.procs import ServiceProcess

REPO = Path(__file__).resolve().parents[3]
ROLES = ("gatekeeper", "producer", "consumer")
READY_S = 90.0
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Service(ServiceProcess):
    """One service process (stopped by its pid), with its stderr alone in its log file."""

    def __init__(self, role: str, port: int, env: dict[str, str], log_dir: Path) -> None:
        super().__init__(role, f"services.{role}", env, log_dir, f"http://127.0.0.1:{port}")
        self.role = role
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        """Launch it: stdout discarded, stderr (the logs) to the log file, nothing else."""
        self.starts += 1
        with self.log_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module], cwd=REPO, env=self.env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(f"{self.role} exited:\n{self.log_tail()}")

    def log_lines(self) -> list[dict[str, Any]]:
        """Every stderr line, each parsed as a JSON object (fails on any other line)."""
        docs = []
        for number, line in enumerate(self.log_path.read_text("utf-8").splitlines(), 1):
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise AssertionError(f"{self.role} stderr line {number} is not JSON: "
                                     f"{line!r}") from None
            assert isinstance(doc, dict), line
            docs.append(doc)
        return docs


@dataclass
class ObservedStack:
    """The services of one deployment, and an HTTP client to reach them."""

    services: dict[str, Service]
    http: httpx.AsyncClient
    texts: list[str] = field(default_factory=list)
    """Every /metrics body scraped, to check for secrets afterwards."""

    def url(self, role: str) -> str:
        return self.services[role].url

    async def metrics(self, role: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """One scrape of ``role``'s /metrics: (name, labels) → value."""
        self.services[role].check_alive()
        response = await self.http.get(f"{self.url(role)}/metrics")
        assert response.status_code == 200, response.text
        self.texts.append(response.text)
        return parse_metrics(response.text)

    async def value(self, role: str, name: str, **labels: str) -> float | None:
        return (await self.metrics(role)).get((name, frozenset(labels.items())))

    async def until(self, role: str, name: str, want: float, within_s: float = 30.0,
                    **labels: str) -> None:
        """Scrape ``role`` until the sample ``name{labels}`` equals ``want``."""
        await self.until_all(role, {(name, frozenset(labels.items())): want}, within_s)

    async def until_all(self, role: str, want: dict[tuple[str, frozenset[tuple[str, str]]],
                                                    float], within_s: float = 30.0) -> None:
        """Scrape ``role`` until every sample in ``want`` has its value in one scrape."""
        deadline = time.monotonic() + within_s
        while True:
            samples = await self.metrics(role)
            seen = {key: samples.get(key) for key in want}
            if seen == want:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{role}: {seen}, expected {want}")
            await asyncio.sleep(0.2)


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text exposition → {(name, labels): value}."""
    out = {}
    for name, labels, value in _SAMPLE.findall(text):
        pairs = frozenset(_LABEL.findall(labels or ""))
        out[(name, pairs)] = float(value)
    return out


def with_name(samples: dict[tuple[str, frozenset[tuple[str, str]]], float],
              name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of one metric, by label set."""
    return {labels: v for (n, labels), v in samples.items() if n == name}


@contextlib.asynccontextmanager
async def observed_stack(env: dict[str, str], logs: Path) -> AsyncIterator[ObservedStack]:
    """Start the three services with ``env`` (plus ports) and wait until all are ready."""
    services = {}
    for role in ROLES:
        port = launcher.free_port()
        key = "AGUI_HTTP_PORT" if role == "consumer" else "AGUI_HEALTH_PORT"
        services[role] = Service(role, port, {**env, key: str(port)}, logs)
        services[role].start()
    try:
        async with httpx.AsyncClient(timeout=10.0) as http:
            stack = ObservedStack(services, http)
            deadline = time.monotonic() + READY_S
            for service in services.values():
                await _ready(http, service, deadline)
            yield stack
    finally:
        await asyncio.gather(*(asyncio.to_thread(s.stop, 15.0) for s in services.values()))


async def _ready(http: httpx.AsyncClient, service: Service, deadline: float) -> None:
    while True:
        service.check_alive()
        with contextlib.suppress(httpx.HTTPError):
            if (await http.get(f"{service.url}/readyz")).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{service.role} not ready:\n{service.log_tail()}")
        await asyncio.sleep(0.2)
