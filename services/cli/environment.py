"""``AGUI_*`` variables no part of agui-relay reads: one warning each, at start.

A misspelt variable was silently ignored (``AGUI_STAT_DIR=/x agui-relay state``
read ``.run/state``, the default; found by probing). Every service and command
now warns once per ``AGUI_*`` name it does not know, naming the closest known
one. The known names are the settings classes' own aliases, so a setting added
to a class is known without more; besides them, the names read outside those
classes (``os.environ.get`` in a command, a container health check, the test
suite's switches) and the families named per agent (``AGUI_UPSTREAM_<NAME>_*``,
``AGUI_DEFAULT_INTERRUPT_TTL_<AGENT>``), which are listed here and checked
against the source by ``tests/unit/cli/test_cli_environment.py``.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Mapping

from pydantic_settings import BaseSettings
from rich.console import Console
from rich.markup import escape

from services.consumer.inbox_feed import InboxSettings
from services.consumer.settings import ConsumerSettings
from services.gatekeeper.settings import GatekeeperSettings
from services.notifier.settings import NotifierSettings
from services.producer.settings import ProducerSettings
from services.runtime.collector import CollectorSettings
from services.runtime.health import HealthSettings
from services.runtime.logging import LogSettings
from services.runtime.settings import KafkaSettings, LimitSettings

PREFIX = "AGUI_"
SETTINGS: tuple[type[BaseSettings], ...] = (
    KafkaSettings, LimitSettings, CollectorSettings, HealthSettings, LogSettings,
    ConsumerSettings, InboxSettings, ProducerSettings, GatekeeperSettings, NotifierSettings)
"""Every settings class (the test finds any left out)."""

READ_ELSEWHERE = frozenset({
    "AGUI_UP_LOG_DIR", "AGUI_UP_HEALTH_PORT_BASE",  # agui-relay up
    "AGUI_API_KEY",  # the operator commands' bearer token (demo)
    "AGUI_URL",  # agui-relay demo --url
    "AGUI_APPROVAL_LEDGER",  # the approval sample agent
    "AGUI_DEFAULT_INTERRUPT_TTL",  # producer workers (services/producer/ttl.py)
    "AGUI_KAFKA_LIB",  # agui-relay kafka: where the jars are
    "AGUI_HEALTHCHECK_URL",  # the container image's health check
    "AGUI_KAFKA_BROKER", "AGUI_FUZZ_CASES", "AGUI_CLUSTER_FULL",  # the tests'
    "AGUI_BENCH_TOKENS", "AGUI_CHROMIUM",  # the benchmarks'
})
"""Names read outside the settings classes."""

FAMILIES = ("AGUI_UPSTREAM_", "AGUI_DEFAULT_INTERRUPT_TTL_")
"""Prefixes of the names made per agent: any name under them may be meant."""


def known_names(settings: Iterable[type[BaseSettings]] = SETTINGS) -> frozenset[str]:
    """The ``AGUI_*`` aliases of ``settings``, and the names read elsewhere."""
    aliases = {field.alias for cls in settings for field in cls.model_fields.values()
               if field.alias and field.alias.startswith(PREFIX)}
    return frozenset(aliases | READ_ELSEWHERE)


def unknown_variables(environ: Mapping[str, str], known: frozenset[str]
                      ) -> list[tuple[str, str | None]]:
    """Each ``AGUI_*`` name in ``environ`` nothing reads, with the closest known one."""
    return [(name, next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.8)), None))
            for name in sorted(environ)
            if name.startswith(PREFIX) and name not in known and not name.startswith(FAMILIES)]


def environment_warnings(environ: Mapping[str, str]) -> list[str]:
    """One line per unknown name."""
    return [f"{name} is not a setting agui-relay reads: ignored"
            + (f" (did you mean {closest}?)" if closest else "")
            for name, closest in unknown_variables(environ, known_names())]


def warn_about_environment(log: logging.Logger | None = None) -> None:
    """Say each unknown ``AGUI_*`` name: in ``log`` (a service's configured logs), else on
    stderr (a command's)."""
    for line in environment_warnings(os.environ):
        if log is not None:
            log.warning(line)
        else:
            Console(stderr=True, soft_wrap=True, highlight=False).print(
                f"[yellow]agui-relay: warning:[/] {escape(line)}")
