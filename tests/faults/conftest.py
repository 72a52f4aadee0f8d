"""Fixtures of the fault suite: a summary line per scenario, printed at the end.

Each scenario reports what it did (repetitions, requests, recovery times,
the checker's counts) through ``summary``; the lines are printed in the
terminal summary of the run (and to stdout as they happen, visible with
``-s``), so a closing note can quote them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LINES:
        terminalreporter.write_sep("-", "fault scenarios")
        for line in LINES:
            terminalreporter.write_line(line)
