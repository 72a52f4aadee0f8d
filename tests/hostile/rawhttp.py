"""HTTP/1.1 by hand over a loopback socket: floods and clients too slow for any library.

An HTTP library finishes what it starts: it will not send a head that
never ends, a megabyte header or a body one byte at a time. These helpers
write exactly the bytes a test gives, then read what the server answers:
``read_answer`` parses one response (status line, headers, a body by
``Content-Length`` or to the close) and ``closed_within`` says whether the
server closed the connection in time. Every read and write has a deadline,
so a server that neither answers nor closes fails the test instead of
hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import orjson

TRANSPORT_ERRORS = (ConnectionError, OSError)


@dataclass
class Answer:
    """One response as read off the wire (status 0: none came before the close)."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    closed: bool = False

    def problem_code(self) -> str | None:
        if not self.headers.get("content-type", "").startswith("application/problem+json"):
            return None
        with contextlib.suppress(orjson.JSONDecodeError):
            doc = orjson.loads(self.body)
            if isinstance(doc, dict) and isinstance(doc.get("code"), str):
                return str(doc["code"])
        return None


class Conn:
    """One TCP connection to the service."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5.0)
        return cls(reader, writer)

    async def send(self, data: bytes, within_s: float = 10.0) -> bool:
        """Write ``data``; False when the server closed or stopped reading."""
        try:
            self.writer.write(data)
            await asyncio.wait_for(self.writer.drain(), within_s)
        except (TimeoutError, *TRANSPORT_ERRORS):
            return False
        return True

    async def read_answer(self, within_s: float) -> Answer:
        """One response, or what came before the server closed or the deadline."""
        deadline = time.monotonic() + within_s
        data = b""
        answer = Answer()
        while b"\r\n\r\n" not in data:
            chunk = await self._read(deadline)
            if not chunk:
                answer.closed = chunk == b""
                return answer
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        answer.status = int(status_line.split()[1])
        for line in lines:
            name, _, value = line.partition(":")
            answer.headers[name.strip().lower()] = value.strip()
        length = int(answer.headers.get("content-length", "-1"))
        while length < 0 or len(body) < length:
            chunk = await self._read(deadline)
            if not chunk:
                answer.closed = chunk == b""
                break
            body += chunk
        answer.body = body if length < 0 else body[:length]
        return answer

    async def closed_within(self, within_s: float) -> bool:
        """True when the server closes the connection within ``within_s``."""
        deadline = time.monotonic() + within_s
        while True:
            chunk = await self._read(deadline)
            if chunk is None:
                return False
            if chunk == b"":
                return True

    async def _read(self, deadline: float) -> bytes | None:
        """Some bytes; b"" at the close (or a reset); None at the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            return await asyncio.wait_for(self.reader.read(65_536), left)
        except TimeoutError:
            return None
        except TRANSPORT_ERRORS:
            return b""

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(*TRANSPORT_ERRORS):
            await asyncio.wait_for(self.writer.wait_closed(), 2.0)


def head(method: str, path: str, headers: list[tuple[str, str]], *, end: bool = True) -> bytes:
    """A request head (``end``: with the blank line that completes it)."""
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers)]
    text = "\r\n".join(lines) + "\r\n"
    return (text + "\r\n" if end else text).encode("latin-1")
