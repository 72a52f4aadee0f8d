"""Raw HTTP/1.1 over a blocking loopback socket, for requests no client library sends.

A library finishes its heads and bodies; these tests need a head that never
ends, a body that stalls, a megabyte header. ``Wire`` writes exactly the
bytes given (in a worker thread, so the server in the test's event loop
keeps running) and ``response`` reads one answer or the close, each with a
deadline, so a server that neither answers nor closes fails the test rather
than hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass

import orjson


@dataclass
class Reply:
    """What came back: a status (0: none), its body, and whether the server closed."""

    status: int
    body: bytes
    closed: bool

    @property
    def code(self) -> object:
        return orjson.loads(self.body).get("code") if self.body.startswith(b"{") else None


class Wire:
    """One TCP connection to 127.0.0.1:``port``."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()

    async def send(self, data: bytes) -> bool:
        """Write ``data``; False when the server closed (it may have answered first)."""
        try:
            await asyncio.to_thread(self.sock.sendall, data)
        except OSError:
            return False
        return True

    async def response(self, within_s: float) -> Reply:
        return await asyncio.to_thread(self._read, within_s)

    def _read(self, within_s: float) -> Reply:
        deadline = time.monotonic() + within_s
        data = b""
        closed = False
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep and len(body) >= _length(head):
                break
        if not data:
            return Reply(0, b"", closed)
        head, _, body = data.partition(b"\r\n\r\n")
        return Reply(int(head.split(b" ", 2)[1]), body, closed)

    async def closed_within(self, within_s: float) -> bool:
        """Whether the server closes the connection (reading what it still sends)."""
        reply = await self.response(within_s)
        while reply.status and not reply.closed:
            reply = await self.response(within_s)
        return reply.closed


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


def head(method: str, path: str, headers: list[tuple[str, str]], *, end: bool = True) -> bytes:
    """A request head: request line, header lines and (with ``end``) the blank line."""
    lines = [f"{method} {path} HTTP/1.1\r\n", *(f"{n}: {v}\r\n" for n, v in headers)]
    return "".join(lines).encode("latin-1") + (b"\r\n" if end else b"")
