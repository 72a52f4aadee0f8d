"""``agui-relay audit THREAD``: every interrupt of a thread, raised then answered.

The operator's copy of ``GET /threads/{threadId}/audit``: the thread's
records read from the topics (``read_thread``) and paired by
``services.agui.audit``, so both show the same trail. A table (one row per
interrupt, in the order raised: who answered, when, the payload's sha256
digest, ``expired`` for an interrupt the expiry policy cancelled) whose id
and digest columns are never cut (``columns``), or with ``--json`` the
same document the HTTP route answers. A thread nothing was written about
is refused (exit 1), as ``threads show`` refuses it.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from services.agui.audit import AuditEntry, audit
from services.cli.ops.columns import Column, Grid, print_grid
from services.cli.ops.kafka_io import EXIT_OK, EXIT_REFUSED, reading, run_command, stderr, stdout
from services.cli.ops.safe import markup, safe
from services.kafka.thread_log import BOUNDARIES, ThreadRecords, read_thread
from services.runtime.settings import KafkaSettings

COLUMNS = (Column("interrupt", ids=True), Column("status"), Column("run", ids=True),
           Column("agent"), Column("reason"), Column("message"), Column("raised"),
           Column("expires"), Column("answered by", ids=True), Column("answered"),
           Column("answer run", ids=True), Column("digest", ids=True))


def when(ms: int) -> str:
    """``YYYY-MM-DD HH:MM:SS.mmm`` in UTC."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def audit_json(found: ThreadRecords) -> dict[str, Any]:
    """The ``--json`` document: the HTTP route's body."""
    entries = audit(found.events, found.decisions)
    return {"threadId": found.thread_id, "interrupts": [e.wire() for e in entries]}


def audit_grid(entries: list[AuditEntry]) -> Grid:
    """One row per interrupt, in the order raised."""
    grid = Grid(COLUMNS)
    for e in entries:
        answer = e.answer
        grid.add(e.interrupt_id, e.status, e.run_id, e.agent or "-", e.reason or "-",
                 e.message or "-", when(e.raised_at_ms), e.expires_at or "-",
                 (answer.by or "-") if answer else "-", when(answer.at_ms) if answer else "-",
                 answer.run_id if answer else "-", (answer.digest or "-") if answer else "-")
    return grid


def print_audit(console: Console, found: ThreadRecords) -> None:
    """The table, or a line saying the thread raised no interrupt."""
    entries = audit(found.events, found.decisions)
    if not entries:
        console.print(f"thread {safe(found.thread_id)} raised no interrupt", markup=False)
        return
    print_grid(console, audit_grid(entries))


async def _audit(settings: KafkaSettings, thread_id: str, as_json: bool,
                 stop: asyncio.Event | None = None) -> int:
    with reading(f"thread {markup(thread_id)}") as progress:  # a run's start and end only
        found = await read_thread(settings, thread_id, event_types=BOUNDARIES, stop=stop,
                                  progress=progress)
    for warning in found.warnings:
        stderr().print(f"[yellow]warning:[/] {markup(warning)}")
    if found.state is None and not found.events and not found.decisions:
        stderr().print(f"[red]unknown thread[/] {markup(thread_id)}: nothing on "
                       f"{markup(settings.topics.threads)}, {markup(settings.topics.events)} "
                       f"or {markup(settings.topics.decisions)}")
        return EXIT_REFUSED
    if as_json:
        sys.stdout.write(orjson.dumps(audit_json(found)).decode() + "\n")
    else:
        print_audit(stdout(), found)
    return EXIT_OK


def audit_command(
    thread_id: Annotated[str, typer.Argument(help="The thread id.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Every interrupt of a thread: raised, then answered (by whom, when, digest) or expired."""
    settings = KafkaSettings()

    async def body(stop: asyncio.Event) -> int:
        return await _audit(settings, thread_id, as_json, stop)

    raise typer.Exit(run_command(body))
