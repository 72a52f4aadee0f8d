"""``agui-relay topics create|describe``: the catalog's topics on the broker.

``create`` makes every topic of the catalog that is missing (idempotent: run
it again and each topic is reported as found) with its configs; ``describe``
only reads. Both print what the broker really has, not what the catalog
asks for, and flag where the two differ. A mismatch that breaks agui-relay
(co-partitioned topics with different partition counts, a missing topic on
``describe``) exits 1; ``--json`` prints the same rows for scripts. The
replicas column is each topic's replication factor and the min ISR its
``min.insync.replicas``: 3 and 2 on a cluster, 1 and 1 on one broker.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from services.cli.up import SAMPLE_AGENTS, agent_names
from services.kafka.admin import TopicState, describe_catalog, ensure_topics
from services.kafka.clients import KafkaError
from services.runtime.settings import KafkaSettings

app = typer.Typer(help="Create and inspect agui-relay's Kafka topics (the topic catalog).",
                  no_args_is_help=True)

AgentsOption = typer.Option(
    SAMPLE_AGENTS, "--agents", envvar="AGUI_AGENTS",
    help="Agents whose dispatch.<agent> topics to include: AGUI_AGENTS form "
         "(name=module:object, comma separated) or bare names.",
)
JsonOption = typer.Option(False, "--json", help="Print the rows as JSON instead of a table.")

HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Row:
    """One topic as printed: the broker's view plus what ``create`` did."""

    state: TopicState
    status: str  # created | found | missing


def retention(ms: str | None) -> str:
    """``retention.ms`` for people: 7 d, 12 h, forever."""
    if ms is None:
        return "-"
    value = int(ms)
    if value < 0:
        return "forever"
    if value % (24 * HOUR_MS) == 0:
        return f"{value // (24 * HOUR_MS)} d"
    if value % HOUR_MS == 0:
        return f"{value // HOUR_MS} h"
    return f"{value} ms"


def problems(states: list[TopicState]) -> list[tuple[bool, str]]:
    """What differs from the catalog, each marked fatal (agui-relay cannot run) or not."""
    out: list[tuple[bool, str]] = []
    co = {s.spec.name: s.partitions for s in states if s.spec.copartitioned and s.exists}
    if len(set(co.values())) > 1:
        counts = ", ".join(f"{name}={n}" for name, n in co.items())
        out.append((True, f"co-partitioned topics disagree on partitions: {counts}"))
    for s in states:
        if not s.exists:
            out.append((True, f"{s.spec.name} is missing"))
            continue
        if s.partitions != s.spec.partitions:
            out.append((False, f"{s.spec.name} has {s.partitions} partitions, the catalog "
                               f"asks for {s.spec.partitions} (AGUI_PARTITIONS)"))
        for key in ("cleanup.policy", "retention.ms"):
            want = s.spec.configs.get(key)
            if want is not None and s.configs.get(key) != want:
                out.append((False, f"{s.spec.name}: {key} is {s.configs.get(key)}, "
                                   f"the catalog asks for {want}"))
    return out


def _policy(state: TopicState) -> str:
    return state.configs.get("cleanup.policy", "-")


def _retention(state: TopicState) -> str:
    if "delete" not in _policy(state):
        return "-"
    return retention(state.configs.get("retention.ms"))


def _table(rows: list[Row], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("topic", no_wrap=True)
    table.add_column("partitions", justify="right")
    table.add_column("cleanup policy")
    table.add_column("retention", justify="right")
    table.add_column("replicas", justify="right")
    table.add_column("min ISR", justify="right")
    table.add_column("co-partitioned", justify="center")
    table.add_column("status")
    colours = {"created": "green", "found": "cyan", "missing": "red"}
    for row in rows:
        s = row.state
        table.add_row(
            s.spec.name, "-" if s.partitions is None else str(s.partitions), _policy(s),
            _retention(s), "-" if s.replicas is None else str(s.replicas),
            s.configs.get("min.insync.replicas", "-"), "yes" if s.spec.copartitioned else "no",
            f"[{colours[row.status]}]{row.status}[/]",
        )
    return table


def _json(rows: list[Row]) -> bytes:
    return orjson.dumps([
        {"topic": r.state.spec.name, "role": r.state.spec.role, "partitions": r.state.partitions,
         "cleanupPolicy": r.state.configs.get("cleanup.policy"),
         "retentionMs": r.state.configs.get("retention.ms"),
         "replicationFactor": r.state.replicas,
         "minInsyncReplicas": r.state.configs.get("min.insync.replicas"),
         "copartitioned": r.state.spec.copartitioned, "status": r.status}
        for r in rows
    ], option=orjson.OPT_INDENT_2)


def _report(rows: list[Row], title: str, as_json: bool) -> None:
    """Print the rows and the problems; exit 1 when a problem is fatal."""
    out = Console(width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True, soft_wrap=True)
    if as_json:
        sys.stdout.write(_json(rows).decode() + "\n")
    else:
        out.print(_table(rows, title))
    found = problems([r.state for r in rows])
    for fatal, text in found:
        err.print(f"[{'red' if fatal else 'yellow'}]{'error' if fatal else 'warning'}:[/] "
                  f"{escape(text)}")
    if any(fatal for fatal, _ in found):
        raise typer.Exit(1)


RowsOf = Callable[[KafkaSettings, tuple[str, ...]], Coroutine[Any, Any, list[Row]]]


def _run(action: str, rows_of: RowsOf, agents: str, as_json: bool) -> None:
    """Run one admin action under the environment's settings and report its rows."""
    settings = KafkaSettings()
    try:
        rows = asyncio.run(rows_of(settings, agent_names(agents)))
    except KafkaError as exc:
        Console(stderr=True).print(
            f"[red]could not {action} at {escape(settings.bootstrap_servers)}:[/] "
            f"{escape(repr(exc))}")
        raise typer.Exit(1) from exc
    _report(rows, escape(f"topics under '{settings.topic_prefix}' on "
                         f"{settings.bootstrap_servers}"), as_json)


async def _create(settings: KafkaSettings, agents: tuple[str, ...]) -> list[Row]:
    reports = await ensure_topics(settings, agents)
    created = {r.spec.name for r in reports if r.created}
    states = await describe_catalog(settings, agents)
    return [Row(s, "created" if s.spec.name in created else "found") for s in states]


async def _describe(settings: KafkaSettings, agents: tuple[str, ...]) -> list[Row]:
    states = await describe_catalog(settings, agents)
    return [Row(s, "found" if s.exists else "missing") for s in states]


@app.command()
def create(agents: str = AgentsOption, as_json: bool = JsonOption) -> None:
    """Create every missing topic with its configs; report each as created or found."""
    _run("create topics", _create, agents, as_json)


@app.command()
def describe(agents: str = AgentsOption, as_json: bool = JsonOption) -> None:
    """Show each catalog topic as the broker has it (exit 1 when one is missing)."""
    _run("describe topics", _describe, agents, as_json)
