"""The forward's HTTP client against a scripted server on loopback (no broker needed).

What a forward relies on: the request goes out as sent (method, target,
headers, body), the head comes back before the body is read, a chunked
body is handed over decoded (every chunk that arrived together in one
piece), a server that closes or never answers fails ``connect`` (the
caller's "before any byte"), a body that falls silent or breaks off just
ends, marked ``broken``, and a small answer that breaks off is no answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.consumer import owner_http

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[str]:
    srv = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.close()


async def request_of(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


async def test_a_chunked_stream_comes_through_decoded_and_the_request_as_sent() -> None:
    seen: list[bytes] = []
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await request_of(reader))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n"
                     b"7\r\ndata: a\r\n7\r\ndata: b\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"7\r\ndata: c\r\n0\r\n\r\n")
        await writer.drain()
        writer.close()

    async with server(handler) as url:
        response = await owner_http.connect(
            url, "POST", "/agents/x%2Fy?q=1", [("authorization", "Bearer t")], b'{"a":1}',
            connect_s=2, read_s=5)
        assert response.status == 200
        assert response.header(b"content-type") == "text/event-stream"
        body = response.body()
        assert await anext(body) == b"data: adata: b"
        release.set()
        assert [piece async for piece in body] == [b"data: c"]
    head = seen[0]
    assert head.startswith(b"POST /agents/x%2Fy?q=1 HTTP/1.1\r\n")
    assert b"authorization: Bearer t\r\n" in head
    assert head.endswith(b'\r\n\r\n{"a":1}')


def answering(raw: bytes) -> Handler:
    """A server that reads the request, writes ``raw`` and closes."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_of(reader)
        writer.write(raw)
        await writer.drain()
        writer.close()
    return handler


async def test_a_small_answer_is_read_whole() -> None:
    async with server(answering(
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/problem+json\r\n"
            b"content-length: 13\r\n\r\n{\"code\":\"x\"}\n")) as url:
        response = await owner_http.connect(url, "GET", "/threads/t", [], None,
                                            connect_s=2, read_s=5)
        assert response.status == 404
        assert await response.read() == b'{"code":"x"}\n'


@pytest.mark.parametrize("answer", [b"", b"not http at all\r\n\r\n"])
async def test_no_answer_fails_connect(answer: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_of(reader)
        writer.write(answer)
        writer.close()

    async with server(handler) as url:
        with pytest.raises(ConnectionResetError, match="owner"):
            await owner_http.connect(url, "GET", "/", [], None, connect_s=2, read_s=5)


async def test_a_refused_connection_and_a_silent_owner_fail_connect() -> None:
    async with server(lambda r, w: asyncio.sleep(0)) as url:
        pass  # closed: nothing listens there now
    with pytest.raises(ConnectionRefusedError):
        await owner_http.connect(url, "GET", "/", [], None, connect_s=2, read_s=5)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(10)

    async with server(silent) as url:
        with pytest.raises(TimeoutError):
            await owner_http.connect(url, "GET", "/", [], None, connect_s=2, read_s=0.2)


async def test_a_body_that_falls_silent_or_breaks_off_just_ends() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_of(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n7\r\ndata: a\r\n")
        await writer.drain()
        await asyncio.sleep(10)

    async with server(handler) as url:
        response = await owner_http.connect(url, "GET", "/", [], None, connect_s=2, read_s=0.3)
        assert [piece async for piece in response.body()] == [b"data: a"]
        assert response.broken


@pytest.mark.parametrize("body", [
    b"content-length: 40\r\n\r\n{\"threadId\": \"t\", \"status\"",
    b"transfer-encoding: chunked\r\n\r\n12\r\n{\"threadId\": \"t\", \r\n",
], ids=["content-length", "chunked"])
async def test_a_small_answer_that_breaks_off_is_no_answer(body: bytes) -> None:
    """Read whole and passed on, a cut JSON document would read as a whole one."""
    async with server(answering(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + body)) as url:
        response = await owner_http.connect(url, "GET", "/threads/t", [], None,
                                            connect_s=2, read_s=5)
        with pytest.raises(ConnectionResetError, match="broke off"):
            await response.read()


async def test_a_whole_answer_is_not_broken() -> None:
    async with server(answering(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n7\r\ndata: a\r\n0\r\n\r\n")) as url:
        response = await owner_http.connect(url, "GET", "/", [], None, connect_s=2, read_s=5)
        assert [piece async for piece in response.body()] == [b"data: a"]
        assert not response.broken


@pytest.mark.parametrize("url", ["http://127.0.0.1:18103x", "http://127.0.0.1:99999",
                                 "http://[::1", "http://h\u2713:8000"])
async def test_an_owner_url_no_connection_can_use_fails_as_before_any_byte(url: str) -> None:
    """Another instance advertised it (an older one, or settings checked less well): the
    forward must fail as a connection does, to be retried or answered 503, never a 500."""
    with pytest.raises(OSError, match="no connection can be made"):
        await owner_http.connect(url, "GET", "/threads/t", [], None, connect_s=1, read_s=1)
