"""One thread with a very long run, read back through the consumer service's history routes.

A run of many tiny ``TEXT_MESSAGE_CONTENT`` deltas (a streaming agent) puts
hundreds of thousands of records on one thread's ``events`` partition. On the
real stack (1,000,000 deltas) ``GET /threads/{id}/audit`` took the consumer
service from 106 MB to 2.96 GB RSS and blocked its event loop for 11.3 s (its
consumer-group session, 6 s, expired and its partitions were reassigned);
``GET /interrupts/threads/{id}`` did the same (2.3 GB, 5.9 s blocked): the
thread's partition was read whole, then every record parsed on the loop
(found by probing). Now the partition is read batch by batch, only the
thread's run boundaries are kept and its transcript is folded off the loop.

These tests write a scaled-down run (``RECORDS`` deltas) straight onto the
topics, as the producer would, and ask the same routes. The loop's longest
gap is reported, not asserted (a shared machine's timing is not a result);
the memory a read adds is.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from consumer_harness import Backstage, serving
from long_runs import long_run
from test_consumer_replay_scans import remembering

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

RECORDS = 200_000
AGENT = "scripted"
GROWTH_MB = 150
"""Most a single history read may add to the process's peak resident memory."""


def _rss_peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


class LoopWatch:
    """The longest the event loop went without running this ticker."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.02)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> LoopWatch:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


@pytest.mark.parametrize("route", ["/threads/{t}/audit", "/interrupts/threads/{t}"])
async def test_a_long_threads_history_neither_freezes_the_service_nor_grows_its_memory(
        kafka: KafkaSettings, backstage: Backstage, route: str) -> None:
    thread, run = f"long-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    await long_run(backstage, thread, run, RECORDS)
    await backstage.write_state(remembering(thread, run), thread)
    async with serving(kafka) as app:
        deadline = time.monotonic() + 30
        while app.relay.threads.get(thread) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        _reset_peak()
        before = _rss_peak_kib()
        with LoopWatch() as watch:
            response = await app.http.get(route.format(t=thread), timeout=120)
        grown_mb = (_rss_peak_kib() - before) / 1024
    assert response.status_code == 200, response.text[:300]
    assert grown_mb < GROWTH_MB, (
        f"GET {route} on a thread of {RECORDS} events blocked the service's event loop "
        f"for {watch.longest:.1f} s and grew its peak memory by {grown_mb:.0f} MB")
