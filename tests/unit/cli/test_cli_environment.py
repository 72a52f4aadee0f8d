"""A misspelt ``AGUI_*`` variable is warned about, naming the closest known one.

``AGUI_STAT_DIR=/x agui-relay state`` read ``.run/state`` (the default) without a
word (found by probing). The known names are the settings classes' aliases and
the few read elsewhere; the checks below keep that set whole: every settings
class is asked, and every ``AGUI_*`` name the code reads or the deployment files
set is known, so no setting in use is ever warned about.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from services.cli.environment import (
    FAMILIES,
    SETTINGS,
    environment_warnings,
    known_names,
    unknown_variables,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--", *patterns], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout.split()
    return [REPO / name for name in listed if (REPO / name).is_file()]


def test_a_misspelt_variable_is_warned_about_by_a_command() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "state"], cwd=REPO, capture_output=True,
        text=True, timeout=60, check=False,
        env={**clean, "COLUMNS": "200", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
             "AGUI_STAT_DIR": "/nonexistent/state", "AGUI_STATE_CACHE_MB": "64"})
    assert done.returncode == 0, done.stderr
    assert ("AGUI_STAT_DIR is not a setting agui-relay reads: ignored "
            "(did you mean AGUI_STATE_DIR?)") in done.stderr
    assert "AGUI_STATE_CACHE_MB" not in done.stderr


def test_a_service_warns_in_its_log_before_it_reads_its_settings() -> None:
    """In the configured log format (JSON lines here), so its log stays machine-readable;
    said before a refused setting stops it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    done = subprocess.run(
        [sys.executable, "-m", "services.consumer"], cwd=REPO, capture_output=True,
        text=True, timeout=60, check=False,
        env={**clean, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:notaport", "AGUI_LOG_FORMAT": "json",
             "AGUI_HTTP_PROT": "8001"})
    (line,) = [line for line in done.stderr.splitlines() if "AGUI_HTTP_PROT" in line]
    logged = json.loads(line)
    assert logged["level"] == "warning"
    assert "did you mean AGUI_HTTP_PORT?" in logged["msg"]


def test_each_unknown_name_once_with_the_closest_known_and_families_left_alone() -> None:
    env = {"AGUI_HTTP_PROT": "1", "AGUI_STATE_DIR": "/s", "AGUI_ZZZ": "1", "KAFKA_X": "1",
           "AGUI_UPSTREAM_BILLING_HEADERS": "{}", "AGUI_UPSTREAM_CONNECT_TIMEOUT_S": "5",
           "AGUI_DEFAULT_INTERRUPT_TTL": "1h", "AGUI_DEFAULT_INTERRUPT_TTL_BILLING": "1h",
           "AGUI_UP_LOG_DIR": "/l", "AGUI_API_KEY": "t"}
    assert unknown_variables(env, known_names()) == [("AGUI_HTTP_PROT", "AGUI_HTTP_PORT"),
                                                     ("AGUI_ZZZ", None)]
    assert environment_warnings(env) == [
        "AGUI_HTTP_PROT is not a setting agui-relay reads: ignored "
        "(did you mean AGUI_HTTP_PORT?)",
        "AGUI_ZZZ is not a setting agui-relay reads: ignored"]


def test_every_settings_class_is_asked() -> None:
    for path in tracked("services/*.py"):
        if "(BaseSettings)" in path.read_text(encoding="utf-8"):
            importlib.import_module(".".join(path.relative_to(REPO).with_suffix("").parts))
    found: set[type[BaseSettings]] = set()
    todo = list(BaseSettings.__subclasses__())
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo += cls.__subclasses__()
    ours = {cls for cls in found if cls.__module__.startswith("services.")}
    assert ours - set(SETTINGS) == set()


READ = re.compile(r"""(?:environ\.get\(|getenv\(|environ\[|envvar=|^[A-Z_]+ = )\s*["']"""
                  r"""(AGUI_[A-Z0-9_]+)["']""", re.MULTILINE)
SET = re.compile(r"\b(AGUI_[A-Z0-9_]*[A-Z0-9])\b")


def test_every_name_read_by_the_code_or_set_by_the_deployment_is_known() -> None:
    read = {name for path in tracked("services", "deploy", "bench", "tests", "contracts")
            if path.suffix == ".py" for name in READ.findall(path.read_text(encoding="utf-8"))}
    deployed = {name for path in tracked("deploy", "Makefile")
                if path.suffix in ("", ".yaml", ".yml") or path.name == "Dockerfile"
                for name in SET.findall(path.read_text(encoding="utf-8"))}
    assert read, "the pattern finds the names read"
    unknown = {name for name in read | deployed
               if name not in known_names() and not name.startswith(FAMILIES)}
    assert unknown == set()
