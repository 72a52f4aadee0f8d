"""Service processes the fault scenarios start, kill and restart.

``ServiceProcess`` runs ``python -m <module>`` with a given environment, its
output appended to a log file (kept across restarts, so a failure shows what
every incarnation said). It is stopped only by its own pid: ``kill()`` sends
SIGKILL (the fault), ``stop()`` SIGTERM then SIGKILL after a grace period
(the cleanup). ``rss_kib()`` reads the resident set from ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


class ServiceDiedError(RuntimeError):
    """A service exited when it should be serving."""


class ServiceProcess:
    """One service instance: start, SIGKILL, restart, stop; always by its own pid."""

    def __init__(self, name: str, module: str, env: dict[str, str], log_dir: Path,
                 health_url: str | None = None) -> None:
        self.name = name
        self.module = module
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.health_url = health_url
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Launch a new incarnation (the previous one must be gone)."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n===== {self.name} start #{self.starts} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module],
                cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.kills += 1
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it is still there after ``grace_s``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def check_alive(self) -> None:
        """Raise ``ServiceDiedError`` with the log tail when the process has exited."""
        if not self.alive():
            code = self.proc.returncode if self.proc is not None else None
            raise ServiceDiedError(f"{self.name} exited (code {code}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text("utf-8", "replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def rss_kib(self) -> int | None:
        """Resident set size in KiB, from /proc (None when not running)."""
        return rss_kib(self.pid) if self.alive() and self.pid is not None else None


def rss_kib(pid: int) -> int | None:
    """``VmRSS`` of ``pid`` in KiB, or None when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None

