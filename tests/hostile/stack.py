"""The whole relay under ``agui-relay up``, as the hostile suite attacks it.

The hostile suite tests what a developer runs (``make run``), not services
started one by one: ``up``'s relay of child output is itself one of the
findings (a long log line froze a service). ``UpStack`` starts
``agui-relay up`` as a subprocess on the session broker (so ``up`` starts no
broker), with its own topic prefix, free ports, two tenants' API keys, JSON
logs in a temporary directory and short HTTP timeouts; it is ready when the
three services' ``/readyz`` answer 200 (``log_format="text"`` for the
terminal form). Each service is a child process of
``up``, found through ``/proc`` (its parent pid and command line), so a test
can read its resident memory and check it is still the same process.

Stopping is part of the test: ``stop()`` sends ``up`` SIGINT and reports
how long it took to exit; whatever outlives the bound is killed by pid
(``up`` first, then the children it left), never by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import httpx

from deploy.kafka.probe import free_port
from services.runtime.settings import KafkaSettings

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("gatekeeper", "producer", "consumer")
TENANTS = {"tenant-a": "key-a-0123456789abcdef", "tenant-b": "key-b-0123456789abcdef"}
READY_S = 120.0
HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 3.0
PORT_ATTEMPTS = 3
PORT_TAKEN = b"Address already in use"
STOP_MARGIN_S = 10.0
"""Beyond ``up``'s own grace period, the time a stop may take before it counts as hung."""


def _port_pair() -> int:
    """A port p such that p and p + 1 are both free on loopback right now."""
    return free_port(count=2)


def _children_of(pid: int) -> dict[int, list[str]]:
    """Processes whose parent is ``pid``, with their command lines."""
    out: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out[int(entry.name)] = [part.decode("utf-8", "replace") for part in cmdline if part]
    return out


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` in KiB, from ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class UpStack:
    """``agui-relay up`` on the session broker, with everything a hostile test needs."""

    bootstrap: str
    workdir: Path
    prefix: str = field(default_factory=lambda: f"hx{uuid.uuid4().hex[:8]}")
    http_port: int = field(default_factory=free_port)
    health_base: int = field(default_factory=_port_pair)
    log_format: str = "json"
    process: subprocess.Popen[bytes] | None = None
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def up_log(self) -> Path:
        return self.workdir / "up.out"

    @property
    def settings(self) -> KafkaSettings:
        return KafkaSettings(bootstrap_servers=self.bootstrap, topic_prefix=self.prefix)

    def readyz_urls(self) -> dict[str, str]:
        """Every service's readiness probe, by service."""
        return {"gatekeeper": f"http://127.0.0.1:{self.health_base}/readyz",
                "producer": f"http://127.0.0.1:{self.health_base + 1}/readyz",
                "consumer": f"{self.url}/readyz"}

    def env(self) -> dict[str, str]:
        keys = ",".join(f"{key}={tenant}" for tenant, key in TENANTS.items())
        return {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "AGUI_TOPIC_PREFIX": self.prefix,
            "AGUI_HTTP_HOST": "127.0.0.1",
            "AGUI_HTTP_PORT": str(self.http_port),
            "AGUI_API_KEYS": keys,
            "AGUI_LOG_FORMAT": self.log_format,
            "AGUI_UP_LOG_DIR": str(self.log_dir),
            "AGUI_UP_HEALTH_PORT_BASE": str(self.health_base),
            "AGUI_HTTP_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
            "AGUI_HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        }

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start ``up`` and wait until every service is ready (fails with ``up``'s output).

        The ports were free when chosen, not reserved: another test's process can bind
        one first (a CI run failed so, ``Address already in use``). Then ``up`` is
        started again on newly chosen ports, at most ``PORT_ATTEMPTS`` times.
        """
        for _ in range(PORT_ATTEMPTS - 1):
            begun = self.up_log.stat().st_size if self.up_log.exists() else 0
            try:
                self._start_once()
                return
            except AssertionError:
                if PORT_TAKEN not in self.up_log.read_bytes()[begun:]:
                    raise
                self.kill()
                self.http_port, self.health_base = free_port(), _port_pair()
        self._start_once()

    def _start_once(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = [str(Path(sys.executable).parent / "agui-relay"), "up"]
        with self.up_log.open("ab") as out:
            self.process = subprocess.Popen(command, cwd=REPO, env=self.env(), stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        deadline = time.monotonic() + READY_S
        waiting = dict(self.readyz_urls())
        with httpx.Client(timeout=2.0) as client:
            while waiting and time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise AssertionError(f"agui-relay up exited {self.process.returncode} "
                                         f"before it was ready:\n{self.output()[-4000:]}")
                for name, probe in list(waiting.items()):
                    with contextlib.suppress(httpx.HTTPError):
                        if client.get(probe).status_code == 200:
                            del waiting[name]
                if waiting:
                    time.sleep(0.5)
        if waiting:
            raise AssertionError(f"not ready within {READY_S:.0f} s: {sorted(waiting)}\n"
                                 f"{self.output()[-4000:]}")
        self.pids = self.find_children()

    def find_children(self) -> dict[str, int]:
        """The pid of each service child of ``up`` (by ``-m services.<name>``)."""
        assert self.process is not None
        found: dict[str, int] = {}
        for pid, argv in _children_of(self.process.pid).items():
            for name in SERVICES:
                if f"services.{name}" in argv:
                    found[name] = pid
        missing = set(SERVICES) - set(found)
        assert not missing, f"no child process of up for {sorted(missing)}"
        return found

    def stop(self, grace_s: float) -> float:
        """SIGINT ``up``; seconds it took to exit (AssertionError if it outlived the bound)."""
        assert self.process is not None
        if self.process.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(grace_s + STOP_MARGIN_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"agui-relay up ignored SIGINT for "
                                 f"{grace_s + STOP_MARGIN_S:.0f} s") from None
        return time.monotonic() - started

    @contextlib.contextmanager
    def running(self) -> Iterator[Self]:
        """Started and ready for the block, killed after it whatever it raised (a fixture's
        whole life)."""
        try:
            self.start()
            yield self
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL ``up`` and the service children it started (by pid)."""
        if self.process is None:
            return
        children = list(self.pids.values())
        if self.process.poll() is None:
            children += list(_children_of(self.process.pid))
            self.process.kill()
            self.process.wait(10)
        for pid in set(children):
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    # ------------------------------------------------------------------ observing

    def output(self) -> str:
        return self.up_log.read_text("utf-8", "replace") if self.up_log.exists() else ""

    def log_files(self) -> dict[str, Path]:
        return {name: self.log_dir / f"{name}.log" for name in SERVICES}

    def rss_kib(self, service: str) -> int:
        return rss_kib(self.pids[service])

    def check_alive(self) -> None:
        """Every service child still runs, and is the process first seen."""
        dead = [name for name, pid in self.pids.items() if not alive(pid)]
        assert not dead, f"service process(es) gone: {dead}\n{self.output()[-3000:]}"
