"""``agui-relay stuck``: threads that need an operator — runs going on too long, expired interrupts.

Read from the compacted ``threads`` topic (the gatekeeper's changelog, one
live ``ThreadState`` per thread) up to its end at start, and judged by
``services.gatekeeper.census`` — the same code behind the gatekeeper's
``agui_threads_running_too_long`` and ``agui_expired_interrupts`` gauges, so
the report and the dashboards agree. A thread is listed when its run
started longer ago than ``--running-longer-than`` (default 5m; compare
``AGUI_RUNNING_TOO_LONG_S``), or when it holds an open interrupt past its
``expiresAt`` (such an interrupt can only be cancelled now:
``agui-relay resume THREAD --cancel ID``; a run can be stopped with
``agui-relay cancel THREAD RUN``). A delegation's child thread's
interrupts are carried up to its parent and answered there, so they are
counted apart (``childInterrupts``), never as open or expired ones; a child
its parent no longer waits on (``orphans``: its parent's run was lost
before it carried the question up) holds interrupts nobody is offered, and
is listed with the command that cancels it. Ids and commands are what an
operator copies, so they print whole at any width (``columns``); ``--json``
prints one object: the counts, the threads and the orphans.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, NamedTuple

import orjson
import typer
from rich.console import Console
from rich.text import Text

from contracts import ThreadState
from services.cli.ops.columns import Column, Grid, id_list, print_grid
from services.cli.ops.command_line import UNTYPABLE
from services.cli.ops.kafka_io import EXIT_OK, reading, run_command, stderr, stdout
from services.cli.ops.orphans import BY_HTTP, Orphan, orphans
from services.cli.ops.render import duration
from services.cli.ops.safe import markup, safe_id
from services.gatekeeper.census import Counts, Stuck, examine
from services.kafka.reader import TopicReader
from services.kafka.records import from_kafka, latest_states
from services.runtime.settings import KafkaSettings

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``90`` or ``90s``, ``10m``, ``2h``, ``1d`` as a duration."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r}: expected a duration such as 90s, 5m, 2h or 1d")
    unit = (match.group(2) or "s").lower()
    try:
        return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[unit])
    except OverflowError as exc:
        raise ValueError(f"{text!r}: too long a duration") from exc


def report_json(counts: Counts, stuck: list[Stuck], now: datetime,
                limit: timedelta, orphaned: list[Orphan] | None = None) -> dict[str, Any]:
    """The ``--json`` document."""
    threads = []
    for item in stuck:
        state = item.state
        expiries = {o.interrupt.id: o.interrupt.expires_at for o in state.open_interrupts}
        threads.append({
            "threadId": state.thread_id,
            "status": state.status,
            "agent": state.agent,
            "runId": state.run_id,
            "runStartedAt": state.run_started_at.isoformat() if state.run_started_at else None,
            "runningForS": item.running.total_seconds() if item.running else None,
            "expiredInterrupts": [{"id": i, "expiresAt": expiries.get(i)} for i in item.expired],
            "updatedAt": state.updated_at.isoformat() if state.updated_at else None,
        })
    return {
        "now": now.isoformat(),
        "runningLongerThanS": limit.total_seconds(),
        "runningTooLong": counts.running_too_long,
        "expiredInterrupts": counts.expired_interrupts,
        "running": counts.running,
        "interrupted": counts.interrupted,
        "openInterrupts": counts.open_interrupts,
        "childInterrupts": counts.child_interrupts,
        "threads": threads,
        "orphans": [orphan_json(o) for o in orphaned or ()],
    }


def orphan_json(orphan: Orphan) -> dict[str, Any]:
    """One orphaned child thread in the ``--json`` document."""
    state = orphan.state
    return {
        "threadId": state.thread_id,
        "agent": state.agent,
        "runId": state.interrupted_run_id,
        "parentThreadId": orphan.parent_thread,
        "parentRunId": state.parent_run_id,
        "parentStatus": orphan.parent.status if orphan.parent else None,
        "openInterrupts": [o.interrupt.id for o in state.open_interrupts],
        "command": orphan.command,
    }


def report_title(counts: Counts, limit: timedelta) -> str:
    """The line above the report's table: the limit and the counts."""
    title = (f"{counts.running_too_long} of {counts.running} running threads running longer "
             f"than {duration(limit.total_seconds())}; {counts.expired_interrupts} of "
             f"{counts.open_interrupts} open interrupts past their expiry")
    if counts.child_interrupts:
        title += (f"; {counts.child_interrupts} more open on child threads, answered at "
                  "their parents")
    return title


def report_grid(stuck: list[Stuck]) -> Grid:
    """The threads to act on: thread, agent, run and interrupt ids printed whole."""
    grid = Grid([Column("thread", ids=True), Column("status"), Column("agent", ids=True),
                 Column("run", ids=True), Column("running for"),
                 Column("expired interrupts", ids=True)])
    for item in stuck:
        state = item.state
        expiries = {o.interrupt.id: o.interrupt.expires_at for o in state.open_interrupts}
        expired = ", ".join(f"{safe_id(i)} ({safe_id(expiries.get(i))})" for i in item.expired)
        grid.add(state.thread_id, state.status, state.agent or "-", state.run_id or "-",
                 Text(duration(item.running.total_seconds()), style="red") if item.running
                 else "-",
                 Text(expired, style="red") if expired else "-")
    return grid


def orphan_title(orphaned: list[Orphan]) -> str:
    """The line above the orphans' table."""
    return (f"{len(orphaned)} child threads their parent no longer waits on (their "
            "interrupts are offered nowhere)")


def orphan_grid(orphaned: list[Orphan]) -> Grid:
    """The child threads no parent waits on, each with the command that cancels it."""
    grid = Grid([Column("child thread", ids=True), Column("parent thread", ids=True),
                 Column("parent"), Column("open interrupts", ids=True),
                 Column("cancel with", ids=True)])
    for orphan in orphaned:
        grid.add(orphan.state.thread_id, orphan.parent_thread,
                 orphan.parent.status if orphan.parent else "no state",
                 id_list(o.interrupt.id for o in orphan.state.open_interrupts),
                 Text(orphan.command) if orphan.command  # a shell's words, exact and inert
                 else Text(f"none: {UNTYPABLE}; {BY_HTTP}", style="yellow"))
    return grid


def print_report(console: Console, counts: Counts, stuck: list[Stuck], limit: timedelta,
                 orphaned: list[Orphan]) -> None:
    """The report for a person: each table under its title line, the orphans' if any."""
    console.print(Text(report_title(counts, limit), style="bold"), soft_wrap=True)
    print_grid(console, report_grid(stuck))
    if orphaned:
        console.print(Text(orphan_title(orphaned), style="bold"), soft_wrap=True)
        print_grid(console, orphan_grid(orphaned))


class _Idle(NamedTuple):
    """A thread idle with nothing open: it counts for nothing but as a parent's status."""

    thread_id: str


class _States(Mapping[str, ThreadState]):
    """The threads the report examines, and the idle ones' ids: an idle thread is read
    back as a bare idle state (an orphan's parent), never held as one."""

    def __init__(self, held: dict[str, ThreadState], idle: set[str]) -> None:
        self._held, self._idle = held, idle

    def __getitem__(self, thread_id: str) -> ThreadState:
        if thread_id in self._held:
            return self._held[thread_id]
        if thread_id in self._idle:
            return ThreadState(thread_id=thread_id)
        raise KeyError(thread_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)


async def _stuck(settings: KafkaSettings, limit: timedelta, as_json: bool) -> int:
    def shape(record: Any) -> ThreadState | _Idle | str | None:
        """A record as what the report reads of it (a warning for an unreadable one, None
        for a tombstone): its history of decisions, queue and run ids left out, an idle
        thread with nothing open reduced to its status, so what is held follows the
        threads that matter, not the states' size."""
        found, warnings = latest_states([from_kafka(record, settings.topics)])
        state = next(iter(found.values()), None)
        if state is None:
            return next(iter(warnings), None)
        if state.status == "idle" and not state.open_interrupts:
            return _Idle(state.thread_id)
        return state.model_copy(update={"recent_decisions": [], "queued": [],
                                        "recent_run_ids": [], "lapsed": None})

    async with TopicReader(settings, "agui-relay-stuck") as reader:
        with reading("thread states"):
            shaped = await reader.latest_shaped(
                await reader.all_partitions(settings.topics.threads), shape)
    for warning in (s for s in shaped if isinstance(s, str)):
        stderr().print(f"[yellow]warning:[/] {markup(warning)}")
    states = _States({s.thread_id: s for s in shaped if isinstance(s, ThreadState)},
                     {s.thread_id for s in shaped if isinstance(s, _Idle)})
    now = datetime.now(UTC)
    counts, stuck = examine(states.values(), now, limit)
    orphaned = orphans(states)
    if as_json:
        doc = report_json(counts, stuck, now, limit, orphaned)
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        return EXIT_OK
    print_report(stdout(), counts, stuck, limit, orphaned)
    return EXIT_OK


def stuck(
    running_longer_than: Annotated[str, typer.Option(
        "--running-longer-than", help="List runs older than this (90s, 5m, 2h, 1d).")] = "5m",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Threads running longer than a limit, interrupts past their expiry, orphaned children."""
    try:
        limit = parse_duration(running_longer_than)
    except ValueError as exc:
        stderr().print(f"[red]error:[/] --running-longer-than {markup(exc)}")
        raise typer.Exit(2) from None
    settings = KafkaSettings()
    raise typer.Exit(run_command(lambda _stop: _stuck(settings, limit, as_json)))
