"""A webhook receiver for the notifier's tests: a plain asyncio HTTP/1.1 server on 127.0.0.1.

It records every attempt (headers, raw body, whether the signature verifies)
and answers as its ``script`` says for the n-th attempt of a delivery id: a
status, or ``HANG`` (read the request, never answer, close later), so tests
can make the first attempts fail with a 500 and then with a timeout; or, as
hostile receivers do, ``TRICKLE`` (a header byte every 50 ms, for ever) or
``ENDLESS`` (a 200 whose chunked body never ends).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from contracts import decode
from contracts.webhooks import WebhookEvent
from services.notifier.signing import verify

HANG = -1
"""Script answer: take the request and never answer it."""

TRICKLE = -2
"""Script answer: an answer's head a byte at a time, 50 ms apart, never ending."""
ENDLESS = -3
"""Script answer: ``200`` with a chunked body of 64 KiB chunks that never ends."""

Script = Callable[[str, int, WebhookEvent], int]
"""(delivery id, attempt number from 1, event) -> status to answer, or HANG."""


@dataclass(frozen=True)
class Attempt:
    delivery_id: str
    headers: dict[str, str]
    body: bytes
    signed: bool
    event: WebhookEvent
    answer: int


def always(status: int) -> Script:
    return lambda _id, _n, _e: status


ACCEPT = always(204)


class Receiver:
    """Records attempts; ``accepted`` holds each delivery id's first 2xx, in arrival order."""

    def __init__(self, secret: bytes, script: Script = ACCEPT, hang_s: float = 30.0,
                 delay_s: float = 0.0) -> None:
        self.secret = secret
        self.delay_s = delay_s
        self.script = script
        self.hang_s = hang_s
        self.attempts: list[Attempt] = []
        self.accepted: list[Attempt] = []
        self.tries: Counter[str] = Counter()
        self.streamed = 0
        """Body bytes an ``ENDLESS`` answer has written so far."""
        self._changed = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()
        self.url = ""

    async def __aenter__(self) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/hooks/agui?token=do-not-log"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)
        await self._server.wait_closed()

    def by_thread(self) -> dict[str, list[WebhookEvent]]:
        """The accepted events per thread, in the order they were accepted."""
        out: dict[str, list[WebhookEvent]] = defaultdict(list)
        for a in self.accepted:
            out[a.event.thread_id].append(a.event)
        return out

    async def wait_for(self, done: Callable[[], bool], within_s: float = 60.0) -> None:
        async with asyncio.timeout(within_s), self._changed:
            await self._changed.wait_for(done)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                answer = await self._record(headers, body)
                await asyncio.sleep(self.delay_s)
                if answer == HANG:
                    await asyncio.sleep(self.hang_s)
                    return
                if answer in (TRICKLE, ENDLESS):
                    await self._hostile(answer, writer)
                    return
                writer.write(f"HTTP/1.1 {answer} X\r\nContent-Length: 0\r\n\r\n".encode())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
                asyncio.CancelledError):  # cancelled: the receiver is closing
            return
        finally:
            self._open.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _hostile(self, answer: int, writer: asyncio.StreamWriter) -> None:
        """Answer as ``TRICKLE`` or ``ENDLESS`` until the client goes away."""
        if answer == TRICKLE:
            writer.write(b"HTTP/1.1 200 OK\r\n")
            while True:
                for byte in b"X-Slow: yes\r\n":
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0.05)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (65536, b"z" * 65536)
        while True:
            writer.write(chunk)
            await writer.drain()
            self.streamed += 65536
            await asyncio.sleep(0.01)

    async def _record(self, headers: dict[str, str], body: bytes) -> int:
        event = decode(WebhookEvent, body)
        delivery_id = headers.get("x-agui-delivery", "")
        self.tries[delivery_id] += 1
        answer = self.script(delivery_id, self.tries[delivery_id], event)
        attempt = Attempt(delivery_id, headers, body,
                          verify(self.secret, body, headers.get("x-agui-signature")), event, answer)
        async with self._changed:
            self.attempts.append(attempt)
            if 200 <= answer < 300 and all(a.delivery_id != delivery_id for a in self.accepted):
                self.accepted.append(attempt)
            self._changed.notify_all()
        return answer
