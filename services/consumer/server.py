"""Serving the app: uvicorn in the caller's event loop, stopped by an event.

``serve(settings, kafka, stop)`` is what both ``agui-relay consumer`` and
``agui-relay up`` run: it does not install signal handlers of its own (the
caller's ``run_until_signalled`` owns them), serves until ``stop`` is set,
then shuts down gracefully — no new connections, open streams given
``GRACE_S`` seconds to end (a stream cut then is truncated, never finished,
and never cancels its run even with ``AGUI_CANCEL_ON_DISCONNECT``: the
client replays it from another instance), then the lifespan closes the
Kafka clients.
No access log: every request line would otherwise be logged twice over
under load; the metrics count requests instead. The HTTP protocol is
uvicorn's httptools one bounded by ``protocol`` (head size and count, head
and body clocks), with the idle keep-alive of ``AGUI_HTTP_KEEPALIVE_S`` and
no WebSocket upgrades (no route takes one).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator

import uvicorn
from fastapi import FastAPI

from services.consumer.app import create_app
from services.consumer.protocol import HttpLimits, bounded_protocol
from services.consumer.relay import Relay
from services.consumer.settings import ConsumerSettings
from services.runtime.settings import KafkaSettings

GRACE_S = 5


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def config(settings: ConsumerSettings, app: FastAPI) -> uvicorn.Config:
    """The uvicorn configuration serving ``app`` (built by ``create_app``)."""
    return uvicorn.Config(
        app,
        host=settings.http_host,
        port=settings.http_port,
        access_log=False,
        log_config=None,
        lifespan="on",
        http=bounded_protocol(HttpLimits.of(settings)),
        ws="none",
        # uvicorn hands it to call_later, which takes any number of seconds
        timeout_keep_alive=settings.http_keepalive_s,  # type: ignore[arg-type]
        loop="none",
        server_header=False,
        timeout_graceful_shutdown=GRACE_S,
        backlog=4096,
    )


async def serve(settings: ConsumerSettings, kafka: KafkaSettings, stop: asyncio.Event,
                on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until ``stop`` is set; ``on_ready(url)`` is called once listening."""
    app = create_app(settings, kafka)
    relay: Relay = app.state.relay
    server = _Server(config(settings, app))

    async def watch() -> None:
        await stop.wait()
        relay.runs.closing = True  # streams cut by the shutdown never cancel their runs
        app.state.interrupts.close()  # inbox change streams end now, not at the grace's end
        server.should_exit = True

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.05)
        if on_ready is not None:
            host, port = server.servers[0].sockets[0].getsockname()[:2]
            on_ready(f"http://{host}:{port}")

    watcher = asyncio.create_task(watch())
    announcer = asyncio.create_task(announce())
    try:
        await server.serve()
    finally:
        for task in (watcher, announcer):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
