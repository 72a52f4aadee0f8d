"""Every setting an operator can set has a row in the README, with its default.

``AGUI_MAX_STREAMS`` (10,000 run streams per consumer-service instance, every
tenant's together; ``503 too_many_streams`` past it) was named once in passing,
and ``AGUI_MAX_BUFFERED_RUNS``, ``AGUI_QUEUED_TIMEOUT_S``, ``AGUI_PRINCIPAL`` and a
dozen more not at all (found by probing): what one tenant can hold of an
instance was written nowhere an operator looks. The names asked for are every
settings class's aliases (``services.cli.environment.SETTINGS``, which its own
test keeps whole) and the upstream agents' family; a name is documented when
the first column of a configuration table (``| variable | default | meaning |``)
or the limit or default column of the Limits table names it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from services.cli.environment import SETTINGS
from services.producer.upstream.config import PREFIX as UPSTREAM
from services.producer.upstream.config import UpstreamConfig

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[3] / "README.md"
NAME = re.compile(r"`([^`]+)`")
PER_AGENT_ONLY = frozenset({"HEADERS"})
"""Upstream settings with no process-wide default (``config.py``)."""


def settings_names() -> set[str]:
    """Every environment variable a settings class reads, and the upstream family as the
    README writes it (``AGUI_UPSTREAM_[<NAME>_]RETRIES``)."""
    names = {field.alias for cls in SETTINGS for field in cls.model_fields.values()
             if field.alias}
    for field in dataclasses.fields(UpstreamConfig):
        if field.name not in ("name", "url"):
            setting = field.name.upper()
            names.add(f"{UPSTREAM}<NAME>_{setting}" if setting in PER_AGENT_ONLY
                      else f"{UPSTREAM}[<NAME>_]{setting}")
    return names


def row_names(cell: str) -> set[str]:
    """The variables a table cell names; ``A_[<NAME>_]X`` / ``Y`` abbreviates ``A_[<NAME>_]Y``."""
    names = NAME.findall(cell)
    family = names[0][:names[0].index("]") + 1] if names and "]" in names[0] else ""
    return {name if name.startswith(("AGUI_", "KAFKA_")) else family + name for name in names}


def documented() -> set[str]:
    """The names in the configuration tables' first column and the Limits table's first two."""
    found: set[str] = set()
    columns = 0
    for line in README.read_text("utf-8").splitlines():
        if line.startswith(("| variable | default |", "| limit | default |")):
            columns = 1 if line.startswith("| variable") else 2
        elif not line.startswith("|"):
            columns = 0
        elif columns:
            for cell in line.split(" | ")[:columns]:
                found |= row_names(cell)
    return found


def test_every_setting_has_a_row_in_the_configuration_tables() -> None:
    missing = sorted(settings_names() - documented())
    assert missing == [], f"settings with no row in README.md's configuration tables: {missing}"


def test_the_rows_are_read_as_written() -> None:
    """The abbreviation a row uses for the upstream family is read as meant."""
    assert row_names("| `AGUI_UPSTREAM_[<NAME>_]VERIFY` / `CA_FILE`") == {
        "AGUI_UPSTREAM_[<NAME>_]VERIFY", "AGUI_UPSTREAM_[<NAME>_]CA_FILE"}
    assert row_names("| `AGUI_LOG_FORMAT` / `AGUI_LOG_LEVEL`") == {
        "AGUI_LOG_FORMAT", "AGUI_LOG_LEVEL"}
    assert {"AGUI_MAX_ID_LENGTH", "AGUI_UPSTREAM_<NAME>_HEADERS",
            "AGUI_WEBHOOK_URL", "AGUI_STREAM_QUEUE_BYTES"} <= documented()
