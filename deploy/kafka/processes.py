"""Broker processes by pid: alive or not, ours or a recycled pid, stopped with care.

Brokers run detached (their own session) so they outlive the command that
started them; afterwards only a pid recorded in the run directory is known.
Before signalling, ``is_broker_of`` checks in ``/proc/<pid>/cmdline`` that the
pid is still ``kafka.Kafka`` for that directory, so a recycled pid is never
signalled. Children started by this process are kept in ``CHILDREN`` and
reaped, so a dead broker does not linger as a zombie that looks alive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from deploy.kafka.errors import BrokerError

CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Popen handles of brokers started by this process, by pid."""


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a stopped process is alive)."""
    child = CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


def is_broker_of(pid: int, data_dir: Path) -> bool:
    """Guard against a recycled pid: the process must be kafka.Kafka for this dir."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not Path("/proc/self/cmdline").exists():
        return alive(pid)  # no procfs (macOS): trust the pid file
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in args and str(data_dir / "server.properties").encode() in args


def wait_exit(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` s for ``pid`` to exit (reaping our child); True if it did."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    CHILDREN.pop(pid, None)
    return True


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; signals this one pid only."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_exit(pid, timeout):
        return
    kill(pid)


def kill(pid: int) -> None:
    """SIGKILL this one pid and wait for it to be gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not wait_exit(pid, 10):
        raise BrokerError(f"broker pid {pid} survived SIGKILL")


def launch(cmd: list[str], cwd: Path, output: Path) -> int:
    """Start ``cmd`` detached (own session), output appended to ``output``; its pid."""
    with output.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )
    CHILDREN[proc.pid] = proc
    return proc.pid
