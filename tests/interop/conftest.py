"""Fixtures of the interop suite: the relay as processes, and the reference client installed."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from relay_system import RelaySystem, relay_system

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
async def system(kafka_bootstrap: str,
                 tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RelaySystem]:
    """Gatekeeper, producer worker (approval, scripted, planner) and consumer service."""
    async with relay_system(kafka_bootstrap, tmp_path_factory.mktemp("relay")) as running:
        yield running


@pytest.fixture(scope="session")
def node_client() -> Path:
    """``tests/interop/node_modules`` with the pinned @ag-ui/client (npm ci when missing)."""
    if not (HERE / "node_modules" / "@ag-ui" / "client" / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed for the interop suite (the reference AG-UI client)")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(HERE)],
                       check=True, timeout=300)
    return HERE
