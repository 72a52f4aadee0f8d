"""Fixtures of the fault suite: a summary line per scenario, printed at the end.

Each scenario reports what it did (repetitions, requests, recovery times,
the checker's counts) through ``summary``; the lines are printed in the
terminal summary of the run (and to stdout as they happen, visible with
``-s``), so a closing note can quote them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from deploy.kafka import launcher
from faults.outages import OwnBroker

LINES: list[str] = []


@pytest.fixture
def summary() -> Callable[[str], None]:
    """Record one summary line for the run's terminal summary."""

    def add(line: str) -> None:
        LINES.append(line)
        print(line)

    return add


@pytest.fixture(autouse=True)
def _quiet_kafka_client_logs() -> None:
    """aiokafka logs every refused connection while a broker restarts; keep warnings only."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@pytest.fixture
async def own_broker(tmp_path: Path) -> AsyncIterator[OwnBroker]:
    """A broker the test may stop and start (``OwnBroker``); stopped after it."""
    launcher.fetch(quiet=True)
    own = await asyncio.to_thread(OwnBroker, tmp_path / "broker")
    try:
        yield own
    finally:
        await own.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LINES:
        terminalreporter.write_sep("-", "fault scenarios")
        for line in LINES:
            terminalreporter.write_line(line)
