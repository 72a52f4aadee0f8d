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

Names are compared as they are read: pydantic-settings reads a class's names in
any case unless its ``case_sensitive`` says otherwise (``AGUI_Stream_Queue=99``
sets the stream queue), ``os.environ`` reads them as written. Compared as
written, a setting taking effect was called ignored and a misspelling in lower
case (``agui_stat_dir``) passed without a word.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

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


@dataclass(frozen=True)
class Known:
    """The ``AGUI_*`` names something reads: ``exact`` only as written (``os.environ``,
    a class with ``case_sensitive=True``), ``folded`` in any case (pydantic-settings'
    default)."""

    exact: frozenset[str]
    folded: frozenset[str]

    @cached_property
    def _lowered(self) -> frozenset[str]:
        return frozenset(name.lower() for name in self.folded)  # as pydantic-settings folds

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.exact or name.lower() in self._lowered)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.exact | self.folded))


def known_names(settings: Iterable[type[BaseSettings]] = SETTINGS) -> Known:
    """The ``AGUI_*`` aliases of ``settings``, each read as its class reads it, and the
    names read elsewhere."""
    exact: set[str] = set(READ_ELSEWHERE)
    folded: set[str] = set()
    for cls in settings:
        aliases = {field.alias for field in cls.model_fields.values()
                   if field.alias and field.alias.startswith(PREFIX)}
        (exact if cls.model_config.get("case_sensitive", False) else folded).update(aliases)
    return Known(frozenset(exact), frozenset(folded))


def _closest(name: str, known: Known) -> str | None:
    """The known name ``name`` most likely means: itself upper-cased when that is read
    (``agui_api_key``, ``agui_upstream_billing_headers``), else the nearest."""
    upper = name.upper()
    if upper in known or upper.startswith(FAMILIES):
        return upper
    return next(iter(difflib.get_close_matches(upper, list(known), n=1, cutoff=0.8)), None)


def unknown_variables(environ: Mapping[str, str], known: Known
                      ) -> list[tuple[str, str | None]]:
    """Each ``AGUI_*`` name in ``environ``, in any case, nothing reads, with the closest
    known one."""
    return [(name, _closest(name, known)) for name in sorted(environ)
            if name.upper().startswith(PREFIX) and name not in known
            and not name.startswith(FAMILIES)]


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
