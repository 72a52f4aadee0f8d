"""A service whose listening port is taken says so in one line naming the variables.

The consumer service (``agui-relay consumer``, and ``agui-relay up``, which shows
its output) printed 80 lines of traceback ending ``OSError: [Errno 98] Address
already in use``, exit status 1, naming neither the port nor ``AGUI_HTTP_PORT``;
the health door of the other services, uvicorn's line and exit status 3 (found by
probing). Both now stop as for any setting a service cannot use: exit status 2.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.settings_errors import USAGE_ERROR

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port this test holds itself, listening."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        yield holder.getsockname()[1]
    finally:
        holder.close()


@pytest.mark.parametrize(("module", "variable", "named"), [
    ("services.consumer", "AGUI_HTTP_PORT", "AGUI_HTTP_HOST/AGUI_HTTP_PORT"),
    ("services.gatekeeper", "AGUI_HEALTH_PORT", "AGUI_HEALTH_HOST/AGUI_HEALTH_PORT"),
    ("services.producer", "AGUI_HEALTH_PORT", "AGUI_HEALTH_HOST/AGUI_HEALTH_PORT"),
])
def test_a_port_in_use_is_said_in_one_line_with_exit_2(
        taken_port: int, module: str, variable: str, named: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    done = subprocess.run(
        [sys.executable, "-m", module], cwd=REPO, capture_output=True, text=True, timeout=60,
        check=False, env={**clean, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
                          "AGUI_TOPIC_PREFIX": "port-in-use", "COLUMNS": "200",
                          variable: str(taken_port)})
    said = done.stdout + done.stderr
    assert "Traceback" not in said, said[-600:]
    assert "╭─" not in said, said[-600:]
    assert done.returncode == USAGE_ERROR, (done.returncode, said[-600:])
    assert f"{named}: cannot listen on 127.0.0.1:{taken_port}" in done.stderr, said[-600:]
    assert "in use" in done.stderr, said[-600:]
