"""An ASGI app served by uvicorn in the test's own event loop, on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn
from starlette.types import ASGIApp


@contextlib.asynccontextmanager
async def served(app: ASGIApp) -> AsyncIterator[int]:
    """The port ``app`` listens on while the block runs (bound before uvicorn starts, so
    nothing else can take it); the server stops, graceful for a second, on the way out."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.02)
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await task
        sock.close()
