"""Pipelined requests: one request cycle per connection, answered in order.

uvicorn's httptools protocol parsed every request in what one read brought (up to
256 KiB), made a ``RequestResponseCycle`` (~3 KiB, freed by the cyclic collector) for
each and queued it while the first was answered: 30 connections writing 256 KiB of
``GET /healthz`` and reading nothing grew the service from 82 to 634 MiB. With the
queue, a lost connection was marked on the *last* request parsed, not the one being
answered (a run's stream went on for a client that had gone), and a refusal of a
queued request's head was written as the answer to the POST before it. The bounded
protocol (``services.consumer.protocol``) holds what follows a request unparsed until
its response is complete.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
from pathlib import Path

import orjson
import pytest
from consumer_harness import AGENT, Backstage, run_input, serving, started
from wire import Wire

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

READ_BYTES = 256 * 1024
"""What one read of asyncio's selector transport takes at most."""
CONNECTIONS = 8


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def run_post(body: dict[str, object]) -> bytes:
    raw = orjson.dumps(body)
    return (f"POST /agents/{AGENT} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw


async def test_pipelined_requests_a_client_never_reads_do_not_grow_the_process(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    blob = request * (READ_BYTES // len(request))
    async with serving(kafka) as app:
        port = int(app.url.rsplit(":", 1)[1])
        before = rss_kib()
        wires = [Wire(port) for _ in range(CONNECTIONS)]
        try:
            for wire in wires:
                await wire.send(blob)  # and never read an answer
            peak = before
            for _ in range(20):
                await asyncio.sleep(0.1)
                peak = max(peak, rss_kib())
            still = await app.http.get("/healthz")
        finally:
            for wire in wires:
                wire.sock.close()
    grown_mib = (peak - before) // 1024
    sent_mib = CONNECTIONS * len(blob) / 1_048_576
    assert still.status_code == 200
    assert grown_mib < 32, (f"{CONNECTIONS} connections sent {sent_mib:.1f} MiB of pipelined "
                            f"requests and read nothing: the process grew {grown_mib} MiB")


async def test_pipelined_requests_are_all_answered_in_order(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """Held requests are parsed as each response completes: none is lost."""
    paths = [b"/healthz", b"/nowhere", b"/healthz"]
    data = b"".join(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path for path in paths)
    async with serving(kafka) as app:
        with Wire(int(app.url.rsplit(":", 1)[1])) as wire:
            await wire.send(data)
            seen = b""
            while seen.count(b"HTTP/1.1 ") < len(paths):
                chunk = await asyncio.to_thread(wire.sock.recv, 65536)
                assert chunk, f"closed after {seen!r}"
                seen += chunk
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", seen)
    assert statuses == [b"200", b"404", b"200"]


async def _leave_a_run_stream(kafka: KafkaSettings, backstage: Backstage,
                              behind: bytes) -> tuple[int, int]:
    """POST a run (with ``behind`` pipelined after it), read up to RUN_STARTED, reset the
    connection: the streams still open 5 s later and the cancels published."""
    body = run_input()
    thread, run = str(body["threadId"]), str(body["runId"])
    async with serving(kafka, cancel_on_disconnect=True) as app:
        port = int(app.url.rsplit(":", 1)[1])
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        await asyncio.to_thread(sock.sendall, run_post(body) + behind)
        await backstage.decide(await backstage.next_request())
        await backstage.emit(thread, run, [started(thread, run)])
        seen = b""
        while b"RUN_STARTED" not in seen:
            chunk = await asyncio.to_thread(sock.recv, 65536)
            assert chunk, "closed before RUN_STARTED"
            seen += chunk
        # the client leaves (a reset, as a killed browser tab or proxy does)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        left = asyncio.get_running_loop().time()
        while app.relay.fanout.stream_count and asyncio.get_running_loop().time() - left < 5:
            await asyncio.sleep(0.05)
        return app.relay.fanout.stream_count, await backstage.control_count()


async def test_a_client_leaving_a_pipelined_run_stream_is_seen_and_cancels_its_run(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    streams, cancels = await _leave_a_run_stream(
        kafka, backstage, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert (streams, cancels) == (0, 1), (
        f"5 s after the client reset its connection: {streams} stream(s) still open for "
        f"it, {cancels} cancel(s) published (AGUI_CANCEL_ON_DISCONNECT is on)")


async def test_without_a_pipelined_request_the_same_client_leaving_is_seen(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """The control: the same exchange, nothing pipelined."""
    assert await _leave_a_run_stream(kafka, backstage, b"") == (0, 1)


@pytest.mark.parametrize("second", [
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 + b"".join(b"X-%d: v\r\n" % i for i in range(120)) + b"\r\n", id="431"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: \x01\r\n\r\n", id="400"),
])
async def test_a_refused_pipelined_request_is_not_answered_in_place_of_a_published_post(
        kafka: KafkaSettings, backstage: Backstage, second: bytes) -> None:
    body = run_input()
    async with serving(kafka) as app:
        with Wire(int(app.url.rsplit(":", 1)[1])) as wire:
            await wire.send(run_post(body))
            request = await backstage.next_request()  # published: it waits for its decision
            await wire.send(second)
            await asyncio.sleep(0.3)
            await backstage.decide(request)  # ... and is admitted: the run goes ahead
            first = await wire.response(5.0)
    assert request.input.run_id == body["runId"]
    assert first.status in (0, 200), (
        f"the POST was published and admitted, but the first (only) answer on its "
        f"connection is {first.status} {first.code}: the client reads that as the POST's")
