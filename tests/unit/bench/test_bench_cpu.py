"""The benchmarks' CPU figures read another process's CPU-time clock, to the nanosecond:
a child that spent some CPU reports it itself, and the clock read from outside agrees."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.consumer import cpu_seconds

pytestmark = pytest.mark.unit

CHILD = """
import sys, time
sum(range(3_000_000))
print(time.process_time(), flush=True)
sys.stdin.read()
"""


def test_another_processs_cpu_time_is_read_finely_and_agrees_with_its_own() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        own = float(child.stdout.readline())
        seen = cpu_seconds(child.pid)
    finally:
        child.communicate("")
    assert own <= seen < own + 0.05  # it only waits on stdin after the print
    assert seen != round(seen, 2)  # finer than /proc's 10 ms clock ticks
    assert cpu_seconds(child.pid) == 0.0  # reaped: nothing to read, no error
