"""Slow and disconnecting SSE clients: the others are served, memory stays bounded.

- **Disconnecting**: clients start runs, read the first frame and hang up.
  The runs go on to their end (no cancel unless configured), every stream
  is released, and a client coming back with ``Last-Event-ID`` gets the
  rest of its run from the replay route.
- **Slow**: clients with a tiny receive window start runs that stream a
  large message and then read at a trickle. Meanwhile ordinary flows over
  the same instance must all complete; afterwards every slow client got its
  whole stream (one that overflows its bounded per-stream buffer goes on
  from the log at its pace, never cut for being slow), and no stream stays
  open.

Resident memory of the consumer service is sampled before and after.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from faults.follower import Follower
from faults.harness import Stack, StackConfig, growth_mib, unique_prefix
from faults.load import HttpLoad, pool_limits, run_input
from faults.scenario import verify
from faults.sse import read_stream

pytestmark = pytest.mark.faults

DISCONNECTING = 60
SLOW = 20
BIG_TEXT = 200_000
RSS_GROWTH_LIMIT_MIB = 100.0
STREAMS_OPEN = re.compile(rb"^agui_consumer_sse_streams_open\s+([0-9.e+]+)", re.M)


async def streams_open(client: httpx.AsyncClient, url: str) -> float:
    found = STREAMS_OPEN.search((await client.get(f"{url}/metrics")).content)
    assert found is not None, "agui_consumer_sse_streams_open is not in /metrics"
    return float(found.group(1))


async def until_no_stream_open(client: httpx.AsyncClient, url: str, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while (value := await streams_open(client, url)) > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    return value


async def hang_up_after_first_frame(client: httpx.AsyncClient, url: str,
                                    n: int) -> tuple[str, str, int]:
    """Start a run, read its first frame, disconnect; (threadId, runId, seq read)."""
    thread_id, run_id = f"hangup-{n}-{uuid.uuid4().hex[:6]}", f"run-{uuid.uuid4().hex[:10]}"
    body = orjson.dumps(run_input(thread_id, run_id, script={"text": "so long", "delayMs": 800}))
    async with client.stream("POST", f"{url}/agents/scripted", content=body,
                             headers={"content-type": "application/json"}) as response:
        assert response.status_code == 200, await response.aread()
        async for event in read_stream(response):
            assert event["type"] == "RUN_STARTED"
            break
    return thread_id, run_id, 0


async def replay_rest(client: httpx.AsyncClient, url: str, thread_id: str, run_id: str,
                      after: int) -> list[str]:
    """The event types a reconnecting client gets after sequence number ``after``."""
    async with client.stream("GET", f"{url}/threads/{thread_id}/runs/{run_id}/events",
                             headers={"Last-Event-ID": str(after)}) as response:
        assert response.status_code == 200, await response.aread()
        return [e["type"] async for e in read_stream(response)]


async def slow_client(url: str, n: int, stall_s: float) -> tuple[str, int]:
    """POST a run streaming a large message over a tiny receive window; read at a trickle.

    Returns how the stream ended ("complete" with a terminal event, "cut" when
    the service closed it first) and the bytes read.
    """
    parts = urlsplit(url)
    thread_id, run_id = f"slow-{n}-{uuid.uuid4().hex[:6]}", f"run-{uuid.uuid4().hex[:10]}"
    body = orjson.dumps(run_input(thread_id, run_id, script={"text": "y" * BIG_TEXT}))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
    head = (f"POST /agents/scripted HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    writer.write(head + body)
    await writer.drain()
    await asyncio.sleep(stall_s)  # read nothing: the window closes, the server must cope
    received = bytearray()
    try:
        while chunk := await asyncio.wait_for(reader.read(2048), 30):
            received += chunk
            await asyncio.sleep(0.005)
    finally:
        writer.close()
    ended = b'"type":"RUN_FINISHED"' in received or b'"type":"RUN_ERROR"' in received
    return ("complete" if ended else "cut"), len(received)


async def test_slow_and_disconnecting_sse_clients(
    kafka_bootstrap: str, tmp_path: Path, summary: Callable[[str], None]
) -> None:
    config = StackConfig(consumers=1)
    async with Stack(kafka_bootstrap, unique_prefix("sse"), tmp_path, config) as stack:
        url = stack.consumer_urls[0]
        async with Follower(stack.settings) as follower, httpx.AsyncClient(
                timeout=60.0, limits=pool_limits(200)) as client:
            before = stack.rss_kib()

            # Disconnecting clients, with ordinary flows beside them.
            async with HttpLoad([url], follower, delay_ms=100) as load:
                hung, normal = await asyncio.gather(
                    asyncio.gather(*(hang_up_after_first_frame(client, url, n)
                                     for n in range(DISCONNECTING))),
                    load.run(flows=30, concurrency=10, duration_s=90))
            endings = [await follower.ending(t, r, 30.0) for t, r, _ in hung]
            outcomes = sorted({e.outcome if e else "never" for e in endings})
            rest = [await replay_rest(client, url, t, r, after) for t, r, after in hung[:10]]
            open_after_hangups = await until_no_stream_open(client, url, 15.0)

            # Slow clients, with ordinary flows beside them.
            async with HttpLoad([url], follower, delay_ms=100) as load2:
                slow, normal2 = await asyncio.gather(
                    asyncio.gather(*(slow_client(url, n, stall_s=4.0) for n in range(SLOW))),
                    load2.run(flows=30, concurrency=10, duration_s=90))
            open_after_slow = await until_no_stream_open(client, url, 15.0)
            after = stack.rss_kib()

        growth = growth_mib(before, after)
        ends = {kind: sum(1 for k, _ in slow if k == kind) for kind in ("complete", "cut")}
        await verify(
            stack, summary, "slow and disconnecting SSE clients",
            f"{DISCONNECTING} hung up after RUN_STARTED (runs ended {outcomes}, replay with "
            f"Last-Event-ID gave the rest), {SLOW} slow readers of {BIG_TEXT // 1000} kB "
            f"messages ({ends}); ordinary flows beside them: {normal.line()} / "
            f"{normal2.line()}; streams open after: {open_after_hangups:g}, "
            f"{open_after_slow:g}; RSS growth MiB {growth}")
        assert outcomes == ["success"], outcomes
        assert all(r and r[-1] in ("RUN_FINISHED", "RUN_ERROR") and "RUN_STARTED" not in r
                   for r in rest), rest
        assert normal.flows_completed == normal.flows == 30, normal.line()
        assert normal2.flows_completed == normal2.flows == 30, normal2.line()
        assert open_after_hangups == 0
        assert open_after_slow == 0
        assert ends["complete"] == SLOW, ends
        assert growth.get("consumer-0", 0.0) < RSS_GROWTH_LIMIT_MIB, growth
