"""``agui-relay notifier``: POST a signed webhook when a thread is interrupted, answered or expires.

Settings come from the environment (``KafkaSettings``, ``NotifierSettings``:
``AGUI_WEBHOOK_URL`` and ``AGUI_WEBHOOK_SECRET`` required,
``AGUI_WEBHOOK_RETRIES``, ``AGUI_WEBHOOK_BACKOFF_S``, ``AGUI_WEBHOOK_TIMEOUT_S``).
SIGINT/SIGTERM stop after the delivery in flight (one waiting for a retry is
left for the next start), commit what was delivered and leave the consumer
group; a second signal stops at once. With ``AGUI_HEALTH_PORT`` set it serves
/healthz, /readyz (partitions assigned and restored) and /metrics there.
"""

from __future__ import annotations

import asyncio
import logging

import typer

from services.cli.environment import warn_about_environment
from services.cli.settings_errors import reporting_settings
from services.kafka.lookup import BrokerWatch
from services.notifier.service import Notifier
from services.notifier.settings import NotifierSettings, safe_url
from services.runtime.health import HealthSettings, serving_health
from services.runtime.lifecycle import run_until_signalled
from services.runtime.logging import configure
from services.runtime.settings import KafkaSettings

log = logging.getLogger("services.notifier")


def notifier() -> None:
    """Notify a webhook of every interrupt raised, answered or expired (signed, at least once)."""
    configure("notifier")
    warn_about_environment(log)
    kafka = KafkaSettings()
    settings = NotifierSettings()  # refused: each variable and why (``reporting_settings``)
    log.info("notifier starting on %s, topics %s.*, webhook %s, %d retries from %g s, "
             "timeout %g s", kafka.bootstrap_servers, kafka.topic_prefix, safe_url(settings.url),
             settings.retries, settings.backoff_s, settings.timeout_s)
    health = HealthSettings()

    async def main(stop: asyncio.Event) -> None:
        service = Notifier(kafka, settings)
        async with serving_health(health.host, health.port, lambda: service.ready,
                                  lambda: service.failing, BrokerWatch(kafka).why_not):
            await service.run(stop)

    run_until_signalled(main)


def main() -> None:
    """Run ``notifier`` with its (absent) options parsed from the command line."""
    reporting_settings(lambda: typer.run(notifier))
