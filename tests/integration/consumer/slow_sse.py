"""A client that reads an SSE stream at its own pace, and the runs that outpace it.

``slow_http`` is an httpx client whose sockets have a 128 KiB receive buffer
(smaller, loopback TCP with its 64 KiB segments crawls at a few frames a
second): httpx reads the socket only while the test iterates the body, so a
test that stops iterating stops reading, and the server's writes back up.
``SseReader`` parses the body as it is read into ``(id, type)`` frames,
reading as fast as the test asks (``read_until``) or with a pause between
reads (``read_to_end``); a connection the server cut ends the read quietly
(``cut``). ``emit_pads`` writes a run's events as a producer would, many at
once, each padded to a size that fills socket buffers quickly; ``open_run`` starts the run
they stream into without reading its body.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
from consumer_harness import AGENT, Backstage, run_input, started

from contracts import EventHeaders
from services.consumer.relay import Relay

RCVBUF = 131_072
WAIT_S = 60.0


@contextlib.asynccontextmanager
async def slow_http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.AsyncHTTPTransport(
        socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)])
    async with httpx.AsyncClient(base_url=url, transport=transport,
                                 timeout=httpx.Timeout(WAIT_S)) as http:
        yield http


class SseReader:
    """Reads one SSE response, frame by frame (see the module docstring)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._chunks = response.aiter_raw()
        self._pending = b""
        self.frames: list[tuple[int, str]] = []
        self.cut = False
        self.ended = False

    @property
    def last_id(self) -> int:
        return self.frames[-1][0] if self.frames else -1

    async def _read(self) -> bool:
        """One read off the socket; False once the body ended (or the server cut it)."""
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            self.ended = True
            return False
        except (httpx.RemoteProtocolError, httpx.ReadError):
            self.cut = self.ended = True
            return False
        self._pending += chunk
        *blocks, self._pending = self._pending.split(b"\n\n")
        for block in blocks:
            seq, data = None, None
            for line in block.split(b"\n"):
                if line.startswith(b"id: "):
                    seq = int(line[4:])
                elif line.startswith(b"data: "):
                    data = orjson.loads(line[6:])
            if data is not None:
                assert seq is not None, block
                self.frames.append((seq, data["type"]))
        return True

    async def read_until(self, seq: int) -> None:
        """Read as fast as the server sends until frame ``seq`` came."""
        async with asyncio.timeout(WAIT_S):
            while self.last_id < seq:
                assert await self._read(), f"the stream ended at {self.last_id}"

    async def read_to_end(self, pause_s: float = 0.0) -> None:
        """Read until the body ends, pausing ``pause_s`` after each read."""
        async with asyncio.timeout(WAIT_S * 3):
            while await self._read():
                if pause_s:
                    await asyncio.sleep(pause_s)


async def emit_pads(backstage: Backstage, thread_id: str, run_id: str, first: int,
                    count: int, size: int) -> None:
    """Write ``count`` CUSTOM events of about ``size`` bytes, seq ``first`` on, at once."""
    topic, key, pad = backstage.kafka.topics.events, thread_id.encode(), "p" * size
    sent = []
    for seq in range(first, first + count):
        value = orjson.dumps({"type": "CUSTOM", "name": "pad", "value": {"n": seq, "p": pad}})
        headers = EventHeaders(run_id, "CUSTOM", AGENT, seq).encode()
        sent.append(await backstage.producer.send(topic, value, key=key, headers=headers))
    await asyncio.gather(*sent)


def counter(relay: Relay, name: str, **labels: str) -> float:
    """A sample of the instance's own metrics (0 when absent)."""
    return relay.metrics.registry.get_sample_value(name, labels) or 0.0


async def until(check: Callable[[], bool], what: str) -> None:
    """Wait until ``check()`` holds (bounded: a test never hangs)."""
    async with asyncio.timeout(WAIT_S):
        while not check():
            await asyncio.sleep(0.02)
    assert check(), what


class BufferPeak:
    """Samples, while it runs, the most events any one stream of the instance buffered
    (``peak``), and the most bytes of event values (``byte_peak``)."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.peak = 0
        self.byte_peak = 0
        self.waiting_peak = 0.0
        self._task: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> BufferPeak:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _sample(self) -> None:
        fanout = self.relay.fanout
        while True:
            # the fan-out's subscriptions are private: read here only to measure them
            for streams in list(fanout._streams.values()):
                for stream in streams:
                    self.peak = max(self.peak, len(stream.buffer))
                    self.byte_peak = max(self.byte_peak, sum(
                        len(d.value) for d in list(stream.buffer._items)))
            self.waiting_peak = max(self.waiting_peak, counter(
                self.relay, "agui_consumer_stream_log_waiting"))
            await asyncio.sleep(0.005)


async def open_run(http: httpx.AsyncClient, backstage: Backstage,
                   thread_id: str | None = None) -> tuple[str, str, SseReader]:
    """POST a run, admit it, write its RUN_STARTED; the body is not read yet."""
    body = run_input(thread_id or f"slow-{uuid.uuid4().hex[:8]}")
    thread_id, run_id = str(body["threadId"]), str(body["runId"])
    post = asyncio.create_task(http.send(
        http.build_request("POST", f"/agents/{AGENT}", json=body), stream=True))
    await backstage.decide(await backstage.next_request())
    response = await post
    assert response.status_code == 200
    await backstage.emit(thread_id, run_id, [started(thread_id, run_id)])
    return thread_id, run_id, SseReader(response)
