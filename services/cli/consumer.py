"""``agui-relay consumer``: the AG-UI HTTP/SSE face alone.

Settings come from the environment (``ConsumerSettings``, ``KafkaSettings``);
``--host``/``--port`` override ``AGUI_HTTP_HOST``/``AGUI_HTTP_PORT``.
SIGINT/SIGTERM shut it down gracefully.
"""

from __future__ import annotations

import asyncio
import logging

import typer

from services.cli.environment import warn_about_environment
from services.cli.settings_errors import reporting_settings
from services.consumer.server import serve
from services.consumer.settings import ConsumerSettings
from services.runtime.lifecycle import run_until_signalled
from services.runtime.logging import configure
from services.runtime.settings import KafkaSettings

log = logging.getLogger("services.consumer")


def consumer(
    host: str | None = typer.Option(None, help="Listen address (AGUI_HTTP_HOST)."),
    port: int | None = typer.Option(None, help="Listen port (AGUI_HTTP_PORT)."),
) -> None:
    """Serve AG-UI over HTTP/SSE: POST /agents/{agent}, thread state, replay, cancel."""
    configure("consumer")
    warn_about_environment(log)
    overrides: dict[str, object] = {}
    if host is not None:
        overrides["http_host"] = host
    if port is not None:
        overrides["http_port"] = port
    settings = ConsumerSettings().model_copy(update=overrides)
    kafka = KafkaSettings()

    async def main(stop: asyncio.Event) -> None:
        await serve(settings, kafka, stop,
                    on_ready=lambda url: log.info("consumer service listening on %s", url))

    run_until_signalled(main)


def main() -> None:
    """Run ``consumer`` with its options parsed from the command line."""
    reporting_settings(lambda: typer.run(consumer))
