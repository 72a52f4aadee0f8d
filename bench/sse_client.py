"""A lean SSE client for the throughput benchmarks: one POST, its frames counted.

The benchmarks' clients share two cores with the service they measure, so
what they spend is capacity taken from it. httpx spent 13 to 20 µs of CPU
per event reading SSE bodies (its chunk iterators, anyio's stream wrappers
and, with one pool of many connections, a scan of every connection per
request); this reads the chunked body straight from the socket and counts
frames in its bytes, about a µs per event. ``Connection: close``: one
connection per run, nothing to pool.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import orjson

FRAME = b"data: "


async def post_sse(url: str, path: str, body: object) -> tuple[int, str | None]:
    """POST ``body`` (JSON) to ``url + path`` and read the SSE response to its end: the
    number of ``data:`` frames, and an error (``HTTP 503``, ``no RUN_FINISHED``) or None."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    payload = orjson.dumps(body)
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head + payload)
        status = await reader.readline()
        if status.split(b" ", 2)[1:2] != [b"200"]:
            return 0, f"HTTP {status.split(b' ', 2)[1].decode() if b' ' in status else '?'}"
        await reader.readuntil(b"\r\n\r\n")  # the headers: uvicorn streams chunked
        frames, tail = 0, b""
        while size := int((await reader.readline()).split(b";", 1)[0], 16):
            chunk = (await reader.readexactly(size + 2))[:-2]  # + its CRLF
            frames += (tail[-5:] + chunk).count(FRAME)  # 5: a "data: " split between chunks
            tail = (tail + chunk)[-256:]
        return frames, None if b"RUN_FINISHED" in tail else "no RUN_FINISHED"
    finally:
        writer.close()
