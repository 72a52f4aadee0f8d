"""The bounded HTTP protocol on a real server and real sockets: heads, slow clients, idleness.

The app is the real one (``serving``) on 127.0.0.1, with uvicorn and the
protocol of ``services.consumer.protocol``; every request is bytes written
by hand (``wire``). What each test shows failed on the plain httptools
protocol: a head of any size or count was served (64 MiB of headers grew
the process by as much), and a head or body that never finished held its
connection open forever. Clocks are set short here so the tests wait
seconds, and the assertions give each several times its timeout.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from consumer_harness import AGENT, Backstage, serving
from wire import Wire, head

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

MAX_HEADER_BYTES = 16_384
MAX_HEADERS = 100
MIB = 1_048_576


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def sized_head(size: int) -> bytes:
    """A GET /healthz whose request line and header lines are exactly ``size`` bytes."""
    bare = head("GET", "/healthz", [("Host", "127.0.0.1"), ("X-Pad", "")], end=False)
    return head("GET", "/healthz", [("Host", "127.0.0.1"), ("X-Pad", "p" * (size - len(bare)))])


def counted_head(count: int) -> bytes:
    return head("GET", "/healthz", [("Host", "127.0.0.1"),
                                    *((f"X-H-{i}", "v") for i in range(count - 1))])


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def exchange(port: int, data: bytes) -> tuple[int, object, bool]:
    with Wire(port) as wire:
        await wire.send(data)
        reply = await wire.response(10.0)
        closed = reply.closed or await wire.closed_within(5.0) if reply.status != 200 else False
        return reply.status, reply.code, closed


async def test_heads_at_the_limits_are_served_one_past_them_431_and_closed(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        port = port_of(app.url)
        at_size = await exchange(port, sized_head(MAX_HEADER_BYTES))
        past_size = await exchange(port, sized_head(MAX_HEADER_BYTES + 1))
        at_count = await exchange(port, counted_head(MAX_HEADERS))
        past_count = await exchange(port, counted_head(MAX_HEADERS + 1))
        still = await app.http.get("/healthz")
    assert at_size[0] == 200
    assert at_count[0] == 200
    assert past_size == (431, "headers_too_large", True)
    assert past_count == (431, "headers_too_large", True)
    assert still.status_code == 200


async def test_a_flood_of_megabyte_headers_is_refused_without_growing_the_process(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        port = port_of(app.url)
        pad = b"f" * MIB
        before = rss_kib()
        with Wire(port) as wire:
            sent = await wire.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            for i in range(64):
                if not sent:
                    break
                sent = await wire.send(b"X-Flood-%d: " % i + pad + b"\r\n")
            if sent:
                await wire.send(b"\r\n")
            reply = await wire.response(10.0)
        grown = rss_kib() - before
        still = await app.http.get("/healthz")
    assert (reply.status, reply.code) == (431, "headers_too_large")
    assert grown < 20 * 1024, f"the process grew {grown // 1024} MiB"
    assert still.status_code == 200


async def test_a_head_that_never_completes_is_closed_after_the_head_timeout(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, http_header_timeout_s=0.5) as app:
        with Wire(port_of(app.url)) as wire:
            await wire.send(head("GET", "/healthz", [("Host", "127.0.0.1")], end=False))
            reply = await wire.response(5.0)
            closed = reply.closed or await wire.closed_within(5.0)
        with Wire(port_of(app.url)) as trickle:  # a byte now and then does not reset it
            sent = await trickle.send(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
            for _ in range(40):
                sent = sent and await trickle.send(b"s")
                await asyncio.sleep(0.1)
            trickled = await trickle.response(5.0)
    assert (reply.status, reply.code, closed) == (408, "request_timeout", True)
    assert (trickled.status, trickled.code) == (408, "request_timeout")


async def test_a_body_that_stalls_gets_408_and_is_closed(
        kafka: KafkaSettings, backstage: Backstage, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with serving(kafka, http_body_timeout_s=0.5) as app:
        with Wire(port_of(app.url)) as wire:
            await wire.send(head("POST", f"/agents/{AGENT}", [
                ("Host", "127.0.0.1"), ("Content-Type", "application/json"),
                ("Content-Length", "1000")]) + b'{"threadId":')
            reply = await wire.response(5.0)
            closed = reply.closed or await wire.closed_within(5.0)
        await asyncio.sleep(0.2)  # the app's side of the request has ended by now
    assert (reply.status, reply.code, closed) == (408, "request_timeout", True)
    assert not [r for r in caplog.records if r.name.startswith(("services", "uvicorn"))
                and (r.levelno >= logging.ERROR or r.exc_info)]


async def test_idle_connections_close_after_the_keep_alive(kafka: KafkaSettings,
                                                          backstage: Backstage) -> None:
    async with serving(kafka, http_keepalive_s=0.5) as app:
        with Wire(port_of(app.url)) as served:
            await served.send(head("GET", "/healthz", [("Host", "127.0.0.1")]))
            reply = await served.response(5.0)
            served_closed = await served.closed_within(5.0)
        with Wire(port_of(app.url)) as silent:  # never sends a byte
            silent_closed = await silent.closed_within(5.0)
    assert (reply.status, reply.closed) == (200, False)
    assert served_closed
    assert silent_closed


async def test_a_body_stalling_after_the_app_answered_is_closed_without_a_second_answer(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    keys = "tok-limits-0123456789abcdef=tenant-a"
    async with serving(kafka, api_keys=keys, http_body_timeout_s=0.5) as app:
        with Wire(port_of(app.url)) as wire:
            await wire.send(head("POST", f"/agents/{AGENT}", [
                ("Host", "127.0.0.1"), ("Content-Type", "application/json"),
                ("Content-Length", "1000")]) + b'{"threadId":')
            refused = await wire.response(5.0)  # 401 before the body is read
            after = await wire.response(5.0)
    assert (refused.status, refused.code, refused.closed) == (401, "unauthorized", False)
    assert (after.status, after.closed) == (0, True)


def host_head(host: str) -> bytes:
    return head("GET", "/interrupts", [("Host", host), ("Connection", "close")])


async def test_on_loopback_a_page_rebound_to_it_is_refused_by_its_host_name(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """With authentication off, a web page whose name was re-pointed at 127.0.0.1 (DNS
    rebinding) could read the inbox and answer interrupts: its requests arrive with its
    own name as ``Host`` (found by probing). On loopback only loopback's names, the
    instance's own and IP literals are answered."""
    async with serving(kafka) as app:
        port = port_of(app.url)
        answered = {host: (await exchange(port, host_head(host)))[0] for host in (
            f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST.", f"[::1]:{port}",
            "10.1.2.3")}
        refused = {host: await exchange(port, host_head(host)) for host in (
            "attacker.example", f"attacker.example:{port}", "localhost.attacker.example",
            "127.0.0.1.nip.io")}
        without = await exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert answered == dict.fromkeys(answered, 200)
    assert refused == dict.fromkeys(refused, (421, "unknown_host", True))
    assert without[0] == 200


async def test_hosts_named_in_the_setting_are_answered_and_a_star_answers_any(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, allowed_hosts="relay.internal, other.example") as app:
        port = port_of(app.url)
        named = (await exchange(port, host_head("relay.internal:9")))[0]
        unnamed = (await exchange(port, host_head("attacker.example")))[0]
    async with serving(kafka, allowed_hosts="*") as app:
        anyone = (await exchange(port_of(app.url), host_head("attacker.example")))[0]
    assert (named, unnamed, anyone) == (200, 421, 200)
