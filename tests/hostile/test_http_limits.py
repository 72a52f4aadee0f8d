"""Finding 4: header floods and slow clients, without a key.

No limit on header size or count and no read timeouts: 64 headers of 1 MiB
each to ``/healthz`` got ``200`` and grew the process by 60 MB, and a
request whose head or body never finished held its connection forever.
Now a head over ``AGUI_HTTP_MAX_HEADER_BYTES`` (16 KiB) or with more than
``AGUI_HTTP_MAX_HEADERS`` (100) headers gets ``431 headers_too_large`` and
the connection closes, a head not complete within
``AGUI_HTTP_HEADER_TIMEOUT_S`` or a body within ``AGUI_HTTP_BODY_TIMEOUT_S``
(2 s and 3 s in this stack) is closed (``408 request_timeout`` when it can
be written), and an idle keep-alive connection closes after
``AGUI_HTTP_KEEPALIVE_S`` (5 s). Waits are bounded at several times the
timeouts: what is tested is that the connection ends, not how fast.
"""

from __future__ import annotations

import time

import pytest

from hostile.rawhttp import Answer, Conn, head
from hostile.stack import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, TENANTS, UpStack

pytestmark = pytest.mark.hostile

MAX_HEADER_BYTES = 16_384
MAX_HEADERS = 100
KEEPALIVE_S = 5.0
SLACK_S = 8.0
"""Added to every timeout before a connection left open counts as held forever."""
RSS_GROWTH_KIB = 20 * 1024
MIB = 1_048_576


def host(relay: UpStack) -> tuple[str, str]:
    return ("Host", f"127.0.0.1:{relay.http_port}")


async def exchange(relay: UpStack, data: bytes, within_s: float = 10.0) -> Answer:
    conn = await Conn.open(relay.http_port)
    try:
        assert await conn.send(data), "the server refused a request it should read"
        return await conn.read_answer(within_s)
    finally:
        await conn.close()


async def assert_too_large(relay: UpStack, data: bytes) -> None:
    conn = await Conn.open(relay.http_port)
    try:
        await conn.send(data)  # the server may close before it has read everything
        answer = await conn.read_answer(10.0)
        assert (answer.status, answer.problem_code()) == (431, "headers_too_large"), answer
        assert b"AGUI_HTTP_MAX_HEADERS" in answer.body, answer.body  # the settings that move it
        assert answer.closed or await conn.closed_within(5.0), "431 but the connection stays"
    finally:
        await conn.close()


def padded_head(relay: UpStack, size: int, *extra: tuple[str, str]) -> bytes:
    """A GET /healthz head of exactly ``size`` bytes (request line, headers, blank line)."""
    bare = head("GET", "/healthz", [host(relay), *extra, ("X-Pad", "")])
    missing = size - len(bare)
    assert missing >= 0
    return head("GET", "/healthz", [host(relay), *extra, ("X-Pad", "p" * missing)])


async def test_a_head_at_the_byte_limit_is_served_one_past_it_is_refused(
        relay: UpStack) -> None:
    below = await exchange(relay, padded_head(relay, MAX_HEADER_BYTES - 64))
    assert below.status == 200, below
    await assert_too_large(relay, padded_head(relay, MAX_HEADER_BYTES + 64))


async def test_a_forwarded_head_may_carry_the_forwards_own_lines_past_the_limit(
        relay: UpStack) -> None:
    """An instance forwarding a client's head held to the limit adds lines of its own
    (``FORWARDED_SLACK``, under 700 bytes): the owner serves that, and no more."""
    forwarded = ("agui-forwarded-by", "http://127.0.0.1:1")
    served = await exchange(relay, padded_head(relay, MAX_HEADER_BYTES + 700, forwarded))
    assert served.status == 200, served
    await assert_too_large(relay, padded_head(relay, MAX_HEADER_BYTES + 1024 + 64, forwarded))
    await assert_too_large(relay, padded_head(relay, MAX_HEADER_BYTES + 700))


async def test_a_hundred_headers_are_served_a_hundred_and_one_refused(relay: UpStack) -> None:
    def with_headers(n: int) -> bytes:
        return head("GET", "/healthz",
                    [host(relay), *((f"X-H-{i}", "v") for i in range(n - 1))])

    served = await exchange(relay, with_headers(MAX_HEADERS))
    assert served.status == 200, served
    await assert_too_large(relay, with_headers(MAX_HEADERS + 1))


async def test_a_flood_of_megabyte_headers_is_cut_off_without_memory_growth(
        relay: UpStack) -> None:
    before = relay.rss_kib("consumer")
    peak = before
    conn = await Conn.open(relay.http_port)
    try:
        sent = await conn.send(head("GET", "/healthz", [host(relay)], end=False))
        for i in range(64):
            if not sent:
                break
            sent = await conn.send(f"X-Flood-{i}: ".encode() + b"f" * MIB + b"\r\n")
            peak = max(peak, relay.rss_kib("consumer"))
        if sent:
            await conn.send(b"\r\n")
        answer = await conn.read_answer(10.0)
        peak = max(peak, relay.rss_kib("consumer"))
        assert answer.status in (0, 431), answer
        assert answer.status == 431 or answer.closed, "neither answered nor closed"
    finally:
        await conn.close()
    assert peak - before <= RSS_GROWTH_KIB, f"consumer RSS grew {(peak - before) // 1024} MiB"
    ok = await exchange(relay, head("GET", "/healthz", [host(relay)]))
    assert ok.status == 200, ok


async def assert_closed_while(conn: Conn, trickle: bytes, within_s: float) -> Answer:
    """Send ``trickle`` a byte every 0.25 s until the server answers or closes."""
    deadline = time.monotonic() + within_s
    for byte in (trickle[i:i + 1] for i in range(len(trickle))):
        assert time.monotonic() < deadline, f"still open after {within_s:.0f} s of trickle"
        if not await conn.send(byte, 2.0):
            return await conn.read_answer(1.0)  # closed: an answer may be waiting
        answer = await conn.read_answer(0.25)
        if answer.status or answer.closed:
            return answer
    raise AssertionError("the trickle ran out before the server closed")


async def test_a_head_that_never_completes_is_closed(relay: UpStack) -> None:
    conn = await Conn.open(relay.http_port)
    try:
        assert await conn.send(head("GET", "/healthz", [host(relay)], end=False))
        answer = await conn.read_answer(HEADER_TIMEOUT_S + SLACK_S)
        assert answer.status in (0, 408), answer
        assert answer.closed or await conn.closed_within(2.0), (
            f"a stalled head held its connection: {answer}")
    finally:
        await conn.close()


async def test_a_head_trickled_byte_by_byte_is_closed(relay: UpStack) -> None:
    conn = await Conn.open(relay.http_port)
    try:
        await conn.send(head("GET", "/healthz", [host(relay)], end=False))
        answer = await assert_closed_while(conn, b"X-Slow: " + b"s" * 400,
                                           HEADER_TIMEOUT_S + SLACK_S)
        assert answer.status in (0, 408), answer
    finally:
        await conn.close()


def post_head(relay: UpStack, length: int) -> bytes:
    return head("POST", "/agents/scripted", [
        host(relay), ("Authorization", f"Bearer {TENANTS['tenant-a']}"),
        ("Content-Type", "application/json"), ("Content-Length", str(length))])


async def test_a_body_that_stalls_gets_408_and_is_closed(relay: UpStack) -> None:
    conn = await Conn.open(relay.http_port)
    try:
        assert await conn.send(post_head(relay, 1000) + b'{"threadId":')
        answer = await conn.read_answer(BODY_TIMEOUT_S + SLACK_S)
        assert (answer.status, answer.problem_code()) == (408, "request_timeout"), answer
        assert answer.closed or await conn.closed_within(5.0), "408 but the connection stays"
    finally:
        await conn.close()


async def test_a_body_trickled_byte_by_byte_gets_408(relay: UpStack) -> None:
    conn = await Conn.open(relay.http_port)
    try:
        assert await conn.send(post_head(relay, 1000))
        answer = await assert_closed_while(conn, b" " * 1000, BODY_TIMEOUT_S + SLACK_S)
        assert answer.status == 408, answer
        assert answer.problem_code() == "request_timeout", answer
    finally:
        await conn.close()


async def test_an_idle_keep_alive_connection_is_closed(relay: UpStack) -> None:
    conn = await Conn.open(relay.http_port)
    try:
        assert await conn.send(head("GET", "/healthz", [host(relay)]))
        answer = await conn.read_answer(10.0)
        assert (answer.status, answer.closed) == (200, False), answer
        assert await conn.closed_within(KEEPALIVE_S + SLACK_S), "idle connection kept open"
    finally:
        await conn.close()
