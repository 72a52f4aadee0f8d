"""SIGKILL a consumer-service instance under HTTP load, three times (two instances).

Clients run interrupt → resume flows over HTTP, spread over both instances.
Killing one cuts its open streams: those clients follow their run on Kafka
and, when their request never got through, send it to the other instance.
Whatever the instance had published must still be decided exactly once and
run to its end; nothing it accepted may vanish, and the restarted instance
serves again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from faults.follower import Follower
from faults.harness import Stack, StackConfig, unique_prefix
from faults.load import HttpLoad
from faults.scenario import verify

pytestmark = pytest.mark.faults

REPS = 3


async def ready_after(url: str, since: float, timeout_s: float = 60.0) -> float:
    """Seconds from ``since`` until ``url``/readyz answers 200."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    return time.monotonic() - since
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{url} not ready {timeout_s:.0f} s after its restart")


async def test_consumer_instance_sigkill_under_http_load(
    kafka_bootstrap: str, tmp_path: Path, summary: Callable[[str], None]
) -> None:
    config = StackConfig(gatekeepers=1, producers=1, consumers=2)
    async with Stack(kafka_bootstrap, unique_prefix("cs"), tmp_path, config) as stack:
        recovery: list[float] = []
        done = asyncio.Event()

        async def faults() -> None:
            try:
                await asyncio.sleep(2.0)
                for rep in range(REPS):
                    index = rep % 2
                    proc = stack.kill("consumer", index)
                    killed = time.monotonic()
                    await asyncio.sleep(0.5)
                    stack.restart("consumer", index)
                    assert proc.health_url is not None
                    recovery.append(await ready_after(proc.health_url, killed))
                    await asyncio.sleep(3.0)
            finally:
                done.set()

        async with Follower(stack.settings) as follower, HttpLoad(
                stack.consumer_urls, follower, delay_ms=300) as load:
            stats, _ = await asyncio.gather(
                load.run(flows=250, concurrency=16, duration_s=150, until=done),
                faults())
        await verify(
            stack, summary, "consumer instance SIGKILL",
            f"{REPS} kills, ready again after [{', '.join(f'{r:.1f}' for r in recovery)}] s; "
            f"{stats.line()}")
        assert not any(500 <= status < 600 and status not in (503, 504)
                       for status in stats.statuses), stats.line()
