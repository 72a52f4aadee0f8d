"""A small HTTP side door for the Kafka-only services: /healthz, /readyz, /metrics.

The gatekeeper and the producer workers speak only Kafka, but orchestrators
probe over HTTP and Prometheus scrapes over HTTP, so each of them serves these
three routes on ``AGUI_HEALTH_PORT`` when it is set (0 or unset: off), bound
to ``AGUI_HEALTH_HOST`` (127.0.0.1; ``0.0.0.0`` in a pod). ``/metrics`` renders
the process's default registry (``services.runtime.metrics``). The consumer
service has the same routes on its own app.

The door is served with the bounded protocol (``http_protocol``), at its
default limits: with uvicorn's own, megabyte header lines grew the process
and connections that sent nothing, or a head that never ended, stayed open
for ever, on a port bound to 0.0.0.0 in a pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.runtime.http_protocol import HeadLimits, bounded_protocol
from services.runtime.listening import listen

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], bool]
FailingChecks = Callable[[], Mapping[str, str]]
"""The readiness checks failing now, by name, each saying why (``partition-3``: ...)."""
BrokerCheck = Callable[[], Awaitable[str | None]]
"""Why no broker answers, or None (``services.kafka.lookup.BrokerWatch.why_not``)."""


class HealthSettings(BaseSettings):
    """Where the side door listens (``AGUI_HEALTH_HOST``, ``AGUI_HEALTH_PORT``)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True,
                                      allow_inf_nan=False)

    host: str = Field("127.0.0.1", alias="AGUI_HEALTH_HOST")
    port: int | None = Field(None, alias="AGUI_HEALTH_PORT", ge=0, le=65535)
    """Unset or 0: no side door."""


def health_app(ready: ReadyCheck, failing: FailingChecks | None = None,
               broker: BrokerCheck | None = None) -> Starlette:
    """The three routes; ``ready()`` and ``broker()`` decide /readyz (True and no reason:
    200, else 503), and a 503 names the checks ``failing()`` reports, so a probe's log
    says which partition, and ``broker`` when no broker answers."""

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        ok = ready()
        checks = dict(failing()) if not ok and failing is not None else {}
        unreachable = await broker() if broker is not None else None
        if unreachable is not None:
            ok, checks["broker"] = False, unreachable
        body: dict[str, object] = {"ready": ok}
        if checks:
            body["checks"] = checks
        return JSONResponse(body, status_code=200 if ok else 503)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[
        Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics),
    ])


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the service that embeds it.

    ``uvicorn.Server.serve`` swaps in its own SIGINT/SIGTERM handlers and
    re-raises the signal on exit, which would bypass the service's graceful
    shutdown; here the service's lifecycle owns the signals.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving_health(host: str, port: int | None, ready: ReadyCheck,
                         failing: FailingChecks | None = None,
                         broker: BrokerCheck | None = None) -> AsyncIterator[None]:
    """Serve the health routes for the duration of the block (no-op when port is falsy);
    ``ConfigurationError`` naming the variables when the port cannot be had."""
    if not port:
        yield
        return
    # log_config=None: uvicorn's own handlers would print text lines among the JSON ones.
    config = uvicorn.Config(health_app(ready, failing, broker), host=host, port=port,
                            log_level="warning", access_log=False, lifespan="off",
                            log_config=None,
                            http=bounded_protocol(HeadLimits()), ws="none")
    sock = listen(host, port, "AGUI_HEALTH_HOST/AGUI_HEALTH_PORT", config.backlog)
    server = EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    log.info("health endpoints on http://%s:%d", host, port)
    try:
        yield
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
