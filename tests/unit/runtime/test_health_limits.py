"""The health side door of the gatekeeper, producer and notifier has the HTTP bounds.

``serving_health`` served ``/healthz``, ``/readyz`` and ``/metrics`` with a plain
``uvicorn.Config``: no head size or count limit, no head clock, and uvicorn arms its
keep-alive timeout only after a response, so a connection that sent nothing, or a head
that never ended, was held for ever and every complete header line of an unfinished
head was kept (20 connections of 4 header lines of 1 MiB grew the gatekeeper from 74 to
158 MiB). Compose and the Kubernetes manifests bind it to 0.0.0.0.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from hostile.rawhttp import Conn

from deploy.kafka.probe import free_port
from services.runtime.health import serving_health

pytestmark = pytest.mark.unit

MIB = 1_048_576
CONSUMER_HEADER_TIMEOUT_S = 10.0
"""``AGUI_HTTP_HEADER_TIMEOUT_S``'s default on the consumer service (the door's too)."""


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _open(port: int) -> Conn:
    for _ in range(50):
        try:
            return await Conn.open(port)
        except OSError:
            await asyncio.sleep(0.05)
    return await Conn.open(port)


async def test_silent_and_unfinished_connections_to_the_health_door_are_closed() -> None:
    port = free_port()
    async with serving_health("127.0.0.1", port, lambda: True):
        silent = await _open(port)
        unfinished = await _open(port)
        await unfinished.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        silent_closed, unfinished_closed = await asyncio.gather(
            silent.closed_within(CONSUMER_HEADER_TIMEOUT_S + 3),
            unfinished.closed_within(CONSUMER_HEADER_TIMEOUT_S + 3))
        for conn in (silent, unfinished):
            await conn.close()
    assert (silent_closed, unfinished_closed) == (True, True), (
        f"after {CONSUMER_HEADER_TIMEOUT_S + 3:g} s: a connection that sent nothing "
        f"{'was closed' if silent_closed else 'is still open'}, one whose head never ended "
        f"{'was closed' if unfinished_closed else 'is still open'}")


async def test_megabyte_headers_to_the_health_door_are_refused_not_kept() -> None:
    port = free_port()
    pad = b"f" * MIB
    async with serving_health("127.0.0.1", port, lambda: True):
        before = rss_kib()
        conns = []
        for c in range(8):
            conn = await _open(port)
            conns.append(conn)
            sent = await conn.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            for i in range(8):
                if not sent:
                    break
                sent = await conn.send(b"X-Flood-%d-%d: " % (c, i) + pad + b"\r\n")
        await asyncio.sleep(0.5)
        grown_mib = (rss_kib() - before) // 1024
        answers = [await conn.read_answer(1.0) for conn in conns]
        for conn in conns:
            await conn.close()
    assert grown_mib < 20, (f"8 unfinished heads of 8 header lines of 1 MiB grew the "
                            f"process {grown_mib} MiB; statuses {[a.status for a in answers]}")
    assert {a.status for a in answers} == {431}, [a.status for a in answers]


async def test_the_health_routes_answer_through_the_bounded_protocol() -> None:
    port = free_port()
    async with serving_health("127.0.0.1", port, lambda: True):
        conn = await _open(port)
        await conn.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                        b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        seen = b""
        while seen.count(b"HTTP/1.1 ") < 2:
            chunk = await asyncio.wait_for(conn.reader.read(65536), 5.0)
            assert chunk, f"closed after {seen!r}"
            seen += chunk
        await conn.close()
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", seen) == [b"200", b"200"]


async def test_the_health_doors_refusal_names_no_consumer_setting() -> None:
    """The ``AGUI_HTTP_*`` limits are the consumer service's: the door's refusal named them,
    sending an operator of the gatekeeper to settings that change nothing there."""
    port = free_port()
    async with serving_health("127.0.0.1", port, lambda: True):
        conn = await _open(port)
        await conn.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n")
        answer = await conn.read_answer(5.0)
        await conn.close()
    assert answer.status == 431, answer
    assert b"header fields" in answer.body, answer.body
    assert b"AGUI_HTTP" not in answer.body, answer.body
