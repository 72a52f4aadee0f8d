"""Every node SIGKILLed for longer than a write's delivery timeout while a run streams.

A ``scripted`` run is between its message and its end when all three nodes
die; they stay down 45 s (longer than aiokafka's 40 s delivery timeout, the
drill saw it with 15 s down under load) and start again. While they come
back one by one, the worker's write of the run's end fails with a retriable
error (its partition has no leader yet, the delivery timed out). The run
must hold and write its end once the cluster takes it: every worker of a
deployment meets the same outage, so a worker that stopped on it would take
the whole worker tier down with it (README "Recovery without help").
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import orjson
import pytest
from faults.harness import Stack, StackConfig, unique_prefix
from faults.load import new_ids, pool_limits, run_input
from faults.procs import ServiceDiedError
from faults.sse import read_stream

from deploy.kafka import launcher

pytestmark = pytest.mark.cluster


async def run_through_outage(cluster: launcher.Cluster, tmp_path: Path,
                             victims: tuple[int, ...], down_s: float) -> None:
    """Kill ``victims`` once a run's message is out, start them after ``down_s``: no
    service may exit, a new run is served and the first one's stream ends."""
    stack = Stack(cluster.bootstrap, unique_prefix("wc"), tmp_path, StackConfig())
    async with stack:
        thread_id, run_id, _ = new_ids("wc", 0)
        body = orjson.dumps(run_input(thread_id, run_id,
                                      script={"text": "through an outage", "delayMs": 3000}))
        message_out = asyncio.Event()
        types: list[str] = []

        async def read() -> None:
            async with httpx.AsyncClient(limits=pool_limits(2)) as client, client.stream(
                    "POST", f"{stack.consumer_urls[0]}/agents/scripted", content=body,
                    timeout=300.0, headers={"content-type": "application/json",
                                            "accept": "text/event-stream"}) as response:
                async for event in read_stream(response):
                    types.append(str(event.get("type")))
                    if event.get("type") == "TEXT_MESSAGE_END":
                        message_out.set()

        reading = asyncio.create_task(read())
        async with asyncio.timeout(60):
            await message_out.wait()
        killed = time.monotonic()
        for i in victims:
            cluster.kill_node(i)

        async def outage() -> None:
            await asyncio.sleep(down_s)
            await asyncio.gather(*(asyncio.to_thread(cluster.start_node, i, 180)
                                   for i in victims))
            await asyncio.to_thread(cluster.wait_in_sync, 180)
            await stack.probe(120)
            async with asyncio.timeout(120):
                await reading

        died: str | None = None
        try:
            await stack.watching(outage())
        except ServiceDiedError as exc:
            lines = str(exc).splitlines()
            died = (f"{time.monotonic() - killed:.0f} s after the kill: {lines[0]} ... "
                    f"{lines[-1]}")
        reading.cancel()
        if died is not None:
            await asyncio.gather(*(asyncio.to_thread(cluster.start_node, i, 180)
                                   for i in victims if not cluster.alive(i)))
        assert died is None, (
            f"a service exited when {len(victims)} of 3 nodes were SIGKILLed for "
            f"{down_s:.0f} s during a run (no service may need a restart): {died}; "
            f"stream got {types}")
        assert types[-1] in ("RUN_FINISHED", "RUN_ERROR"), types


async def test_worker_outlives_the_whole_cluster_down_during_a_run(
        relay_cluster: launcher.Cluster, tmp_path: Path) -> None:
    await run_through_outage(relay_cluster, tmp_path, (0, 1, 2), 45.0)
