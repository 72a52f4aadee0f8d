"""SIGKILL the consumer instance that owns partitions, mid-stream (issue 15, item 4).

Three consumer-service instances own the partitions between them; runs on
threads covering every partition are each posted to a random instance (most
are forwarded to their owner) and read until they are mid-stream. Then one
instance is killed. Every client whose stream broke — its own instance was
killed, or the owner it was forwarded to — reconnects to a surviving
instance with ``Last-Event-ID`` (the replay route, forwarded to the new
owner once the group has handed the dead instance's partitions on; a
``503 owner_unavailable`` meanwhile is retried after its ``Retry-After``)
and must get exactly the rest of its run: the sequence numbers it saw and
the ones it got after, together, are the run's whole stream, each once,
ending with its terminal event. The killed instance is started again and
serves; the fault suite's checker finds no run lost or doubled.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from faults.harness import Stack, StackConfig, unique_prefix
from faults.scenario import verify
from services.cli.ops.agui_http import sse_lines
from services.kafka.partitioning import partition_for

pytestmark = pytest.mark.faults

RUNS = 16
DELAY_MS = 9_000
"""Each run waits this long after its text, so every stream is open when the kill comes."""
RECONNECT_S = 60.0
TERMINALS = frozenset({"RUN_FINISHED", "RUN_ERROR"})


@dataclass
class Client:
    """One run followed as a browser's EventSource would: reconnect with Last-Event-ID."""

    thread_id: str
    run_id: str
    first: str
    """The instance the run was posted to."""
    seqs: list[int] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    reconnects: int = 0

    @property
    def ended(self) -> bool:
        return bool(self.types) and self.types[-1] in TERMINALS

    async def read(self, response: httpx.Response, mid: asyncio.Event | None = None) -> None:
        """Take frames until the terminal one or until the stream breaks off."""
        seq: int | None = None
        data: list[str] = []
        try:
            async for line in sse_lines(response.aiter_text()):
                if line.startswith("id:"):
                    seq = int(line[3:].strip())
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif line == "" and data:
                    event = orjson.loads("\n".join(data))
                    data = []
                    assert seq is not None
                    self.seqs.append(seq)
                    self.types.append(event["type"])
                    if event["type"] == "TEXT_MESSAGE_END" and mid is not None:
                        mid.set()
                    if self.ended:
                        return
        except httpx.HTTPError:
            return  # cut: the caller reconnects
        finally:
            await response.aclose()


async def reconnect(http: httpx.AsyncClient, client: Client, urls: list[str],
                    rng: random.Random) -> None:
    """Continue the run through surviving instances until its terminal event."""
    deadline = time.monotonic() + RECONNECT_S
    while not client.ended:
        assert time.monotonic() < deadline, f"run {client.run_id} not continued in time"
        url = rng.choice(urls)
        client.reconnects += 1
        headers = {"Last-Event-ID": str(client.seqs[-1])} if client.seqs else {}
        request = http.build_request(
            "GET", f"{url}/threads/{client.thread_id}/runs/{client.run_id}/events",
            headers=headers)
        try:
            response = await http.send(request, stream=True)
        except httpx.HTTPError:
            await asyncio.sleep(0.5)
            continue
        if response.status_code == 503:
            await response.aread()
            assert response.json()["code"] in ("owner_unavailable", "not_ready")
            await asyncio.sleep(float(response.headers.get("retry-after", "1")))
            continue
        assert response.status_code == 200, (response.status_code, await response.aread())
        await client.read(response)


async def test_a_killed_owners_clients_continue_through_another_instance(
        kafka_bootstrap: str, tmp_path: Path, summary: Callable[[str], None]) -> None:
    config = StackConfig(gatekeepers=1, producers=1, consumers=3)
    rng = random.Random(4)
    async with Stack(kafka_bootstrap, unique_prefix("po"), tmp_path, config) as stack:
        urls = stack.consumer_urls
        threads: list[str] = []
        while len({partition_for(t, config.partitions) for t in threads}) < config.partitions \
                or len(threads) < RUNS:
            threads.append(f"po-{uuid.uuid4().hex[:10]}")
        clients = [Client(t, f"run-{uuid.uuid4().hex[:8]}", rng.choice(urls))
                   for t in threads[:RUNS]]
        async with httpx.AsyncClient(timeout=httpx.Timeout(90.0, connect=2.0)) as http:
            readers = []
            for client in clients:
                body: dict[str, Any] = {
                    "threadId": client.thread_id, "runId": client.run_id,
                    "messages": [{"id": "m1", "role": "user", "content": "hi"}],
                    "forwardedProps": {"script": {"text": "partial", "delayMs": DELAY_MS}}}
                response = await http.send(http.build_request(
                    "POST", f"{client.first}/agents/scripted", json=body), stream=True)
                assert response.status_code == 200, await response.aread()
                mid = asyncio.Event()
                readers.append((asyncio.create_task(client.read(response, mid)), mid))
            async with asyncio.timeout(60):
                await asyncio.gather(*(mid.wait() for _, mid in readers))
            killed = stack.kill("consumer", 0)
            survivors = [u for u in urls if u != killed.health_url]
            await asyncio.gather(*(task for task, _ in readers))
            cut = [c for c in clients if not c.ended]
            await asyncio.gather(*(reconnect(http, c, survivors, rng) for c in cut))
            stack.restart("consumer", 0)
            await stack.ready()
        for client in clients:
            assert client.types[0] == "RUN_STARTED"
            assert client.types[-1] == "RUN_FINISHED", client
            assert client.seqs == list(range(len(client.seqs))), client
        await verify(stack, summary, "partition owner SIGKILL mid-stream",
                     f"{len(cut)} of {RUNS} streams cut, each continued through another "
                     f"instance ({sum(c.reconnects for c in cut)} reconnects)")
        assert cut, "the killed instance served no stream: the test proved nothing"
