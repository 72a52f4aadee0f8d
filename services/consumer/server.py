"""Serving the app: uvicorn in the caller's event loop, stopped by an event.

``serve(settings, kafka, stop)`` is what both ``agui-relay consumer`` and
``agui-relay up`` run: it does not install signal handlers of its own (the
caller's ``run_until_signalled`` owns them), serves until ``stop`` is set,
then shuts down gracefully — no new connections, open streams given
``GRACE_S`` seconds to end (a stream cut then is truncated, never finished,
and never cancels its run even with ``AGUI_CANCEL_ON_DISCONNECT``: the
client replays it from another instance), then the lifespan closes the
Kafka clients.
The socket is bound before the app is built (``bind``), so the instance
knows its port when it joins the consumer-service group: its advertised URL
(``advertised_url``) is ``AGUI_ADVERTISED_URL``, else the listen address
(the host name when listening on every interface).
No access log: every request line would otherwise be logged twice over
under load; the metrics count requests instead. The HTTP protocol is
uvicorn's httptools one bounded by ``protocol`` (head size and count, head
and body clocks), with the idle keep-alive of ``AGUI_HTTP_KEEPALIVE_S`` and
no WebSocket upgrades (no route takes one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Generator

import uvicorn
from fastapi import FastAPI

from services.consumer.app import create_app
from services.consumer.protocol import HttpLimits, bounded_protocol
from services.consumer.relay import Relay
from services.consumer.settings import ConsumerSettings
from services.kafka.admin import check_compacted
from services.kafka.clients import KafkaError
from services.runtime.listening import listen
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

GRACE_S = 5
BACKLOG = 4096


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
        http=bounded_protocol(HttpLimits.of(settings),
                              app.state.relay.metrics.streams_idle_closed.inc),
        ws="none",
        # uvicorn hands it to call_later, which takes any number of seconds
        timeout_keep_alive=settings.http_keepalive_s,  # type: ignore[arg-type]
        loop="none",
        server_header=False,
        timeout_graceful_shutdown=GRACE_S,
        backlog=BACKLOG,
    )


WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def bind(settings: ConsumerSettings) -> socket.socket:
    """The listening socket on ``AGUI_HTTP_HOST:AGUI_HTTP_PORT`` (port 0: a free one);
    ``ConfigurationError`` naming them when it cannot be had (a port in use). Listening
    from now: the group may name this instance an owner before the server starts, and a
    request forwarded here then waits in the backlog."""
    return listen(settings.http_host, settings.http_port, "AGUI_HTTP_HOST/AGUI_HTTP_PORT",
                  BACKLOG)


def advertised_url(settings: ConsumerSettings, sock: socket.socket | None = None) -> str:
    """Where other instances reach this one ("" when it cannot be told: port 0, unbound)."""
    if settings.advertised_url:
        return settings.advertised_url.rstrip("/")
    port = sock.getsockname()[1] if sock is not None else settings.http_port
    if not port:
        return ""
    host = socket.gethostname() if settings.http_host in WILDCARDS else settings.http_host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(settings: ConsumerSettings, kafka: KafkaSettings, stop: asyncio.Event,
                on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until ``stop`` is set; ``on_ready(url)`` is called once listening.
    ``ConfigurationError`` when the store on disk would restore from a ``threads`` topic
    that is not compacted (``check_compacted``)."""
    if settings.state_dir is not None:
        try:
            await check_compacted(kafka, (kafka.topics.threads,))
        except KafkaError as exc:  # not reachable yet: served, not ready, as before
            log.warning("could not check the cleanup policy of %s: %s",
                        kafka.topics.threads, exc)
    sock = bind(settings)
    app = create_app(settings, kafka, url=advertised_url(settings, sock))
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
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        for task in (watcher, announcer):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
