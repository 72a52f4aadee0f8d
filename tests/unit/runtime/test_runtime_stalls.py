"""A loop blocked past the limit is logged with the frames that block it, once per stall,
and its end too; a loop that only waits is never reported."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

import pytest

from services.runtime.stalls import LoopWatch

pytestmark = pytest.mark.unit


@contextlib.contextmanager
def watching(caplog: pytest.LogCaptureFixture, blocked_s: float) -> Iterator[LoopWatch]:
    caplog.set_level(logging.WARNING, "services.runtime.stalls")
    watch = LoopWatch(blocked_s=blocked_s, beat_s=0.05)
    watch.start()
    try:
        yield watch
    finally:
        watch.stop()


def an_agent_that_sleeps_in_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # what a hosted agent must never do (asyncio.to_thread)


async def test_a_blocked_loop_is_named_where_it_is_blocked_once_and_its_end_too(
        caplog: pytest.LogCaptureFixture) -> None:
    with watching(caplog, 0.3) as watch:
        an_agent_that_sleeps_in_the_loop(1.0)
        await asyncio.sleep(0.3)  # the loop beats again
    messages = [r.getMessage() for r in caplog.records]
    assert watch.stalls == 1
    blocked = [m for m in messages if "has run nothing" in m]
    assert len(blocked) == 1, messages
    assert "an_agent_that_sleeps_in_the_loop" in blocked[0]
    assert "test_runtime_stalls.py" in blocked[0]
    assert any("ran again after" in m for m in messages), messages


async def test_a_loop_that_only_waits_is_never_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    with watching(caplog, 1.0) as watch:
        await asyncio.sleep(1.5)
    assert watch.stalls == 0
    assert not caplog.records
