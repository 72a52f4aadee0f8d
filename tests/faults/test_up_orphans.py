"""``agui-relay up`` must never leave its services running once it has exited.

Its children run in sessions of their own (``start_new_session=True``), so a
Ctrl-C or a SIGTERM reaches ``up`` only: whatever ends ``up`` must stop them,
or they keep the ports, the partitions and the gatekeeper's static id
(``gatekeeper-0``) and the next ``up`` fails against them.

Both found by probing:

1. ``agui-relay up | tee up.log`` and Ctrl-C: the reader of ``up``'s output
   is gone, so ``console.print("Stopping services...")`` raised (rich turns the
   ``BrokenPipeError`` into ``SystemExit``; a full disk under a redirected
   stdout gives ``OSError``) before the children were stopped, and ``up``
   exited with every service still running.
2. A SIGTERM while ``up`` spawned its children, before its handlers were
   installed: ``up`` died of the default action and the children already
   spawned ran on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from hostile.stack import _children_of, alive

from deploy.kafka.probe import free_port

pytestmark = pytest.mark.faults

REPO = Path(__file__).resolve().parents[2]
SETTLE_S = 40.0
"""A generous wait for processes to go (``up``'s own grace is 15 s): a wait, not the assertion."""


def _env(bootstrap: str, tmp_path: Path, port: int) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))},
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "AGUI_TOPIC_PREFIX": f"uo{uuid.uuid4().hex[:8]}",
            "AGUI_PARTITIONS": "2",
            "AGUI_HTTP_HOST": "127.0.0.1", "AGUI_HTTP_PORT": str(port),
            "AGUI_UP_LOG_DIR": str(tmp_path / "logs"),
            "AGUI_STATE_DIR": str(tmp_path / "state"),
            "AGUI_LOG_FORMAT": "text", "PYTHONUNBUFFERED": "1"}


def _wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_with_up_piped_into_a_reader_that_is_gone_stops_every_service(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    up = subprocess.Popen([sys.executable, "-m", "services.cli.main", "up"], cwd=REPO,
                          env=_env(kafka_bootstrap, tmp_path, free_port()),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL)
    children: list[int] = []
    try:
        assert up.stdout is not None
        seen = b""
        deadline = time.monotonic() + 120
        while b"agui-relay is up" not in seen and time.monotonic() < deadline:
            chunk = up.stdout.read1(65536)
            if not chunk:
                break
            seen += chunk
        assert b"agui-relay is up" in seen, seen[-3000:].decode("utf-8", "replace")
        children = list(_children_of(up.pid))
        assert len(children) >= 3
        up.stdout.close()          # `| tee` killed by the same Ctrl-C
        up.send_signal(signal.SIGINT)
        up.wait(SETTLE_S + 20)
        left = _wait_gone(children)
        assert not left, f"up exited ({up.returncode}) leaving its services running: {left}"
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)
        _kill(children)


DRIVER = textwrap.dedent("""
    import asyncio, os, runpy, signal, sys
    import services.cli.up as up
    original, PIDS = up.spawn, sys.argv[1]
    async def spawn(name, module, env):
        child = await original(name, module, env)
        with open(PIDS, "a") as f:
            f.write(f"{child.process.pid}\\n")
        if name == "gatekeeper":
            os.kill(os.getpid(), signal.SIGTERM)   # the operator's SIGTERM lands now
            await asyncio.sleep(0.5)
        return child
    up.spawn = spawn
    sys.argv = ["agui-relay", "up"]
    runpy.run_module("services.cli.main", run_name="__main__")
""")


def test_sigterm_while_up_spawns_its_services_leaves_none_running(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    pids_file = tmp_path / "spawned"
    up = subprocess.Popen([sys.executable, "-c", DRIVER, str(pids_file)], cwd=REPO,
                          env=_env(kafka_bootstrap, tmp_path, free_port()),
                          stdout=(tmp_path / "up.out").open("wb"), stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL)
    spawned: list[int] = []
    try:
        up.wait(120)
        assert pids_file.exists(), (tmp_path / "up.out").read_text("utf-8", "replace")[-3000:]
        spawned = [int(line) for line in pids_file.read_text().split()]
        left = _wait_gone(spawned)
        assert not left, f"up died of SIGTERM ({up.returncode}) leaving {left} running"
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)
        if pids_file.exists():
            _kill([int(line) for line in pids_file.read_text().split()])
