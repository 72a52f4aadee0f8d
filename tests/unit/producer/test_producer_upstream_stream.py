"""``BoundedStream``: an upstream's body, bounded per event, passed on in reads worth parsing.

An event (bytes up to a blank line) over the limit fails the stream wherever
its line ends are, in any of the three line-end forms SSE allows and across
read edges; bytes sent a couple per read are joined before the parser keeps
them (it holds each read of an unfinished line as a string of its own), and
no read holding a line end waits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from services.producer.upstream.client import BoundedStream, EventTooLongError

pytestmark = pytest.mark.unit


class Reads(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def passed_on(chunks: list[bytes], limit: int = 1000) -> list[bytes]:
    return [chunk async for chunk in BoundedStream(Reads(chunks), limit)]


def events(ending: bytes, count: int = 50, size: int = 100) -> bytes:
    return b"".join(b"data: " + b"x" * size + ending for _ in range(count))


@pytest.mark.parametrize("ending", [b"\n\n", b"\r\r", b"\r\n\r\n", b"\n\r\n", b"\r\n\r",
                                    b"\r\n\n", b"\n\r"])
@pytest.mark.parametrize("read", [1, 2, 7, 64, 100_000])
async def test_events_under_the_limit_pass_in_every_line_end_form_and_read_size(
        ending: bytes, read: int) -> None:
    body = events(ending)  # 5,000+ bytes in all, each event ~110
    chunks = [body[i:i + read] for i in range(0, len(body), read)]
    assert b"".join(await passed_on(chunks, limit=200)) == body


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
async def test_lines_without_a_blank_line_between_them_are_one_event(ending: bytes) -> None:
    body = events(ending)
    with pytest.raises(EventTooLongError):
        await passed_on([body[i:i + 64] for i in range(0, len(body), 64)], limit=200)


async def test_a_line_sent_two_bytes_a_read_is_passed_on_in_reads_of_64_kib() -> None:
    line = b"data: " + b"y" * 300_000
    out = await passed_on([line[i:i + 2] for i in range(0, len(line), 2)], limit=1_000_000)
    assert b"".join(out) == line
    assert len(out) == -(-len(line) // BoundedStream.HOLD)
    assert all(len(chunk) >= BoundedStream.HOLD for chunk in out[:-1])


async def test_a_read_with_a_line_end_is_passed_on_at_once_with_what_was_held() -> None:
    out = await passed_on([b"da", b"ta", b": {}", b"\n", b"\n", b"da"])
    assert out == [b"data: {}\n", b"\n", b"da"]
