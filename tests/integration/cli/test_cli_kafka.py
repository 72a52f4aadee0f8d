"""``agui-relay kafka up --port`` beside another broker: its controller follows its port.

The controller port was always 9093, so a second broker on this machine
(``--port 19300`` beside the default one, or beside a test's) could not
start while another broker held 9093, whatever ``--port`` said; and the
command had no option to move it. It is now PORT+1 unless
``--controller-port`` says otherwise.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from deploy.kafka.probe import free_port, port_free
from services.cli.broker import app

pytestmark = pytest.mark.integration


async def invoke(*args: str) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, app, list(args))


def two_free_ports() -> int:
    """A port whose next one is free too (9093, the old controller port, is left alone:
    another test may start a broker on the default ports)."""
    for _ in range(100):
        port = free_port()
        if port_free(port + 1):
            return port
    raise AssertionError("no two consecutive free ports")


async def test_a_broker_on_another_port_puts_its_controller_next_to_it(tmp_path: Path) -> None:
    port = two_free_ports()
    data = str(tmp_path / "kafka")
    try:
        up = await invoke("up", "--port", str(port), "--dir", data)
        assert up.exit_code == 0, up.output
        status = await invoke("status", "--dir", data)
        assert status.exit_code == 0, status.output
        assert f"127.0.0.1:{port}" in status.output
        assert not port_free(port + 1)  # its controller
    finally:
        down = await invoke("down", "--dir", data)
    assert down.exit_code == 0, down.output
    assert "stopped" in down.output


async def test_a_controller_port_is_for_one_broker_only(tmp_path: Path) -> None:
    result = await invoke("up", "--brokers", "3", "--controller-port", "19999",
                          "--dir", str(tmp_path / "cluster"))
    assert result.exit_code == 2
    assert "--controller-port is for one broker" in result.output
