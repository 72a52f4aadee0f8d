"""The HTTP client a forward speaks to the owner with: one connection, httptools' parser.

A forwarded run streams hundreds of events through this instance, each one a
chunk of the owner's chunked SSE body. A general client hands them over one
chunk at a time through several layers of pure-Python parsing (httpx over
h11: measured, most of what a forward costs per event). Here a forward is one
plain asyncio connection (``Connection: close``, so nothing is pooled and
nothing outlives the request) whose response is parsed by httptools, the C
parser uvicorn serves with, and whose body is handed over **per socket
read**: every chunk that arrived together is one piece, so a stream under
load costs a few reads, not one round of parsing per event.

``connect`` sends the request and returns once the response head is in
(``OwnerResponse``: status, raw headers, ``body()`` to iterate, ``read()`` for
a small answer, ``close()``); it raises ``OSError`` or ``TimeoutError`` when
nothing came back (the caller's "failed before any byte"). A body read that
waits longer than ``read_s`` or breaks off ends the body, marked ``broken``:
the caller passes on a truncated stream, never an invented end; ``read``,
which takes a small answer whole before any of it is passed on, raises
instead (a cut JSON document passed on would read as a whole one).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from urllib.parse import urlsplit

import httptools

READ_BYTES = 65_536


class _Parsed:
    """httptools' callbacks: the head, then body pieces."""

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.done = False
        self.pieces: list[bytes] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class OwnerResponse:
    """The owner's answer: its head, and its body as it arrives."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 parser: httptools.HttpResponseParser, parsed: _Parsed, read_s: float) -> None:
        self._reader = reader
        self._writer = writer
        self._parser = parser
        self._parsed = parsed
        self._read_s = read_s
        self.status = parser.get_status_code()
        self.headers = parsed.headers
        self.replay: bytes | None = None
        """The body, when it was read already (to see what a 503 was)."""
        self.broken = False
        """The body ended before the message did (the connection broke, went silent, or
        the bytes stopped being HTTP): what was passed on of it is truncated."""

    def header(self, name: bytes) -> str:
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return ""

    async def body(self, silence_s: float | None = None) -> AsyncIterator[bytes]:
        """The body, one piece per socket read; ends at its end, a break or a silence
        (``silence_s``, else the ``read_s`` the head was waited for)."""
        parsed = self._parsed
        silence_s = self._read_s if silence_s is None else silence_s
        try:
            while True:
                if parsed.pieces:
                    piece = b"".join(parsed.pieces)
                    parsed.pieces.clear()
                    yield piece
                if parsed.done:
                    return
                try:
                    async with asyncio.timeout(silence_s):
                        data = await self._reader.read(READ_BYTES)
                except (OSError, TimeoutError):
                    self.broken = True
                    return
                if not data:  # the end of a body read to the close, or a break
                    with contextlib.suppress(httptools.HttpParserError):
                        self._parser.feed_data(b"")
                    self.broken = not parsed.done
                    parsed.done = True
                    continue
                try:
                    self._parser.feed_data(data)
                except httptools.HttpParserError:
                    self.broken = True
                    return
        finally:
            self.close()

    async def read(self) -> bytes:
        """The whole body (a small answer: a problem, a thread's state); ConnectionResetError
        when it broke off (passed on, a cut JSON document would read as a whole one)."""
        body = b"".join([piece async for piece in self.body()])
        if self.broken:
            raise ConnectionResetError("the owner's answer broke off before its end")
        return body

    def close(self) -> None:
        self._writer.close()


async def connect(url: str, method: str, target: str, headers: Iterable[tuple[str, str]],
                  body: bytes | None, *, connect_s: float, read_s: float) -> OwnerResponse:
    """Send the request to ``url`` (``http://host:port``) and wait for the response head."""
    try:  # an owner's URL comes from another instance: not trusted to parse
        where = urlsplit(url)
        host, port = where.hostname or "127.0.0.1", where.port or 80
        if not where.netloc.isascii():
            raise ValueError("a host that is not ASCII")
    except ValueError as exc:  # the caller's "failed before any byte", not a 500
        raise ConnectionError(f"no connection can be made to {url!r}: {exc}") from None
    async with asyncio.timeout(connect_s):
        reader, writer = await asyncio.open_connection(host, port, limit=READ_BYTES * 4)
    try:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {where.netloc}", "Connection: close",
                 *(f"{k}: {v}" for k, v in headers)]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        parsed = _Parsed()
        parser = httptools.HttpResponseParser(parsed)
        async with asyncio.timeout(read_s):
            while not parsed.head_done:
                data = await reader.read(READ_BYTES)
                if not data:
                    raise ConnectionResetError("the owner closed the connection before answering")
                try:
                    parser.feed_data(data)
                except httptools.HttpParserError as exc:
                    raise ConnectionResetError(f"the owner's answer is not HTTP: {exc}") from exc
    except BaseException:
        writer.close()
        raise
    return OwnerResponse(reader, writer, parser, parsed, read_s)
