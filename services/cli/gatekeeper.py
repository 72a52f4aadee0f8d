"""``agui-relay gatekeeper``: the gatekeeper alone.

Settings come from the environment (``KafkaSettings``, ``GatekeeperSettings``:
``AGUI_BUSY_POLICY``, ``AGUI_UNKNOWN_ENTRY_POLICY`` and the loop tuning).
SIGINT/SIGTERM finish the transaction in flight, hand the partitions back
and leave the consumer group; a second signal stops at once. A state store
that cannot be read stops it with one error line and exit status 1 (its
next start rebuilds the store). With
``AGUI_HEALTH_PORT`` set it serves /healthz, /readyz (partitions assigned
and restored, none stalled: a 503 names the stalled partition) and /metrics
there.
"""

from __future__ import annotations

import asyncio
import logging

import typer

from services.cli.environment import warn_about_environment
from services.cli.settings_errors import reporting_settings
from services.gatekeeper.processor import Processor
from services.gatekeeper.settings import GatekeeperSettings
from services.gatekeeper.threadstore import StoreUnreadableError
from services.kafka.lookup import BrokerWatch
from services.runtime.health import HealthSettings, serving_health
from services.runtime.lifecycle import run_until_signalled
from services.runtime.logging import configure
from services.runtime.settings import KafkaSettings

log = logging.getLogger("services.gatekeeper")


def gatekeeper() -> None:
    """Decide every run request: no run is dispatched past an open or expired interrupt."""
    configure("gatekeeper")
    warn_about_environment(log)
    kafka = KafkaSettings()
    settings = GatekeeperSettings()
    log.info(
        "gatekeeper starting on %s, topics %s.*, busy=%s, unknown entries=%s",
        kafka.bootstrap_servers,
        kafka.topic_prefix,
        settings.busy_policy,
        settings.unknown_entry_policy,
    )

    health = HealthSettings()

    async def main(stop: asyncio.Event) -> None:
        processor = Processor(kafka, settings)
        async with serving_health(health.host, health.port, lambda: processor.ready,
                                  lambda: processor.failing, BrokerWatch(kafka).why_not):
            await processor.run(stop)

    try:
        run_until_signalled(main)
    except StoreUnreadableError:  # said once where it was met; its restart rebuilds the store
        raise SystemExit(1) from None


def main() -> None:
    """Run ``gatekeeper`` with its (absent) options parsed from the command line."""
    reporting_settings(lambda: typer.run(gatekeeper))
