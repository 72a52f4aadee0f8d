"""A consumer instance frozen while it owns partitions (SIGSTOP: a long pause, a host
gone silent with its connections open).

A request for one of its threads, taken by another instance, is forwarded
to it and gets no answer: its connection accepts and says nothing. The
forward waited for the answer's head for its whole read bound (the longest
a queued decision may take, minutes with the defaults) although the group
hands the frozen instance's partitions on after its session timeout. Now the
wait ends when the partition's owner changes, and the request is retried at
the new owner: every client gets its answer well inside its own timeout.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from pathlib import Path

import httpx
import pytest

from faults.harness import Stack, StackConfig, unique_prefix
from services.kafka.partitioning import partition_for

pytestmark = pytest.mark.faults

CLIENT_TIMEOUT_S = 60.0
"""Under the forward's read bound (160 s with the defaults), well over the session
timeout and a rebalance (the 6 s the harness sets, and a few seconds)."""
FAILED_FIRST = re.compile(
    rb'^agui_consumer_forwards_total\{outcome="failed_before_any_byte"\} (\S+)$', re.M)


async def run_to_end(http: httpx.AsyncClient, url: str, thread: str) -> None:
    body = {"threadId": thread, "runId": f"{thread}-r1",
            "messages": [{"id": "m1", "role": "user", "content": "hi"}],
            "forwardedProps": {"script": {"text": "hello"}}}
    response = await http.post(f"{url}/agents/scripted", json=body)
    assert response.status_code == 200, response.text[:300]
    assert b"RUN_FINISHED" in response.content


async def thread_state(http: httpx.AsyncClient, url: str, thread: str) -> tuple[int, str]:
    """The thread's status through ``url``, retried after a 503's Retry-After."""
    while True:
        response = await http.get(f"{url}/threads/{thread}")
        if response.status_code == 503:
            assert response.json()["code"] in ("owner_unavailable", "not_ready"), response.text
            await asyncio.sleep(float(response.headers.get("retry-after", "1")))
            continue
        return response.status_code, response.json().get("status", "")


async def test_a_frozen_owners_threads_are_answered_by_the_instance_that_takes_them_over(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    config = StackConfig(gatekeepers=1, producers=1, consumers=2)
    async with Stack(kafka_bootstrap, unique_prefix("fz"), tmp_path, config) as stack:
        frozen, survivor = stack.services["consumer"]
        assert frozen.pid is not None
        assert survivor.health_url is not None
        threads: dict[int, str] = {}
        while len(threads) < config.partitions:
            thread = f"fz-{uuid.uuid4().hex[:10]}"
            threads.setdefault(partition_for(thread, config.partitions), thread)
        async with httpx.AsyncClient(timeout=httpx.Timeout(CLIENT_TIMEOUT_S, connect=2.0)
                                     ) as http:
            for thread in threads.values():
                await run_to_end(http, survivor.health_url, thread)
            os.kill(frozen.pid, signal.SIGSTOP)
            try:
                answers = await asyncio.gather(*(thread_state(http, survivor.health_url, t)
                                                 for t in threads.values()))
            finally:
                os.kill(frozen.pid, signal.SIGCONT)
            assert answers == [(200, "idle")] * len(threads)
            found = FAILED_FIRST.search((await http.get(f"{survivor.health_url}/metrics")
                                         ).content)
            assert found is not None, "no forward went to the frozen instance"
            assert float(found.group(1)) > 0, "no forward went to the frozen instance"
        await stack.ready()
