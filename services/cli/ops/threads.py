"""``agui-relay threads``: every thread the gatekeeper knows, and ``threads show ID``.

The list comes from the compacted ``threads`` topic (the gatekeeper's
changelog, one live ``ThreadState`` per thread), read from the beginning to
the end offsets captured at start: status (a delegation's child thread
marked ``child of`` its parent, where its interrupts are answered), agent,
open interrupts, the oldest expiry and last activity, filtered by ``--status``, ``--expired``
and ``--agent``. ``show`` reads the one partition the thread's key maps to
on ``threads``, ``events`` and ``decisions`` and prints its runs, its
decisions and its open interrupts with their ``responseSchema``. The state
is read first and the events after it, to their end, so a run that ended a
moment ago may be in the events while the state still reads ``running``
(the gatekeeper writes the new state after it reads the end): ``settled``
then reads the state again until it is past that end, for at most
``SETTLE_S``, and else shows the state the end produces, derived with the
gatekeeper's rules as the consumer service derives it (``catchup``). Ids are
what an operator copies into ``resume`` and ``cancel``, so the tables
print them whole at any width, boxed in a terminal and as plain aligned
columns in a pipe (``columns``); the count of threads goes to stderr.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from contracts import ThreadState
from contracts.codec import to_wire
from contracts.records import parent_thread
from services.cli.ops.columns import Column, Grid, id_list, print_grid
from services.cli.ops.kafka_io import (
    EXIT_OK,
    EXIT_REFUSED,
    reading,
    run_command,
    stderr,
    stdout,
)
from services.cli.ops.render import clock, duration, interrupt_line, time_left
from services.cli.ops.safe import markup, safe_id, safe_json
from services.cli.ops.threadview import (
    RunSummary,
    ThreadRow,
    row_of,
    run_ending,
    select,
    summarize_runs,
)
from services.consumer.catchup import boundary, closed, passed
from services.kafka.reader import TopicReader
from services.kafka.records import from_kafka, latest_states
from services.kafka.thread_log import BOUNDARIES, ThreadRecords, read_state, read_thread
from services.runtime.settings import KafkaSettings, LimitSettings

app = typer.Typer(help="Threads from the compacted thread-state topic.", no_args_is_help=False)

SETTLE_S = 2.0
"""How long ``threads show`` re-reads a state that is behind the events it read."""
SETTLE_POLL_S = 0.05

_STATUS_STYLE = {"idle": "green", "running": "cyan", "interrupted": "bold yellow"}


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    return f"{duration((now - moment).total_seconds())} ago"


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")


def thread_grid(rows: list[ThreadRow], now: datetime) -> Grid:
    """The ``threads`` table: ids (thread, agent, run, open interrupts) printed whole."""
    grid = Grid([Column("thread", ids=True), Column("status"), Column("agent", ids=True),
                 Column("run", ids=True), Column("open interrupts", ids=True),
                 Column("oldest expiry"), Column("last activity")])
    for row in rows:
        opened = id_list(row.open_interrupts)
        if row.expired:
            opened.append(f" ({len(row.expired)} expired)", style="red")
        status = Text(row.status, style=_STATUS_STYLE.get(row.status, "white"))
        if row.child_of is not None:  # its interrupts are carried up and answered there
            status.append(f", child of {safe_id(row.child_of)}", style="dim")
        grid.add(row.thread_id, status,
                 row.agent or "-", row.run_id or "-", opened,
                 time_left(row.oldest_expiry, now) if row.oldest_expiry else "-",
                 _ago(row.last_activity, now))
    return grid


async def _list(settings: KafkaSettings, status: str | None, expired: bool, agent: str | None,
                as_json: bool) -> int:
    now = datetime.now(UTC)

    def shape(record: Any) -> ThreadRow | str | None:
        """A record as its row (a warning for an unreadable one, None for a tombstone): a
        row per thread is what is held, never the states."""
        states, warnings = latest_states([from_kafka(record, settings.topics)])
        state = next(iter(states.values()), None)
        return row_of(state, now) if state is not None else next(iter(warnings), None)

    async with TopicReader(settings, "agui-relay-threads") as reader:
        with reading("thread states"):
            shaped = await reader.latest_shaped(
                await reader.all_partitions(settings.topics.threads), shape)
    for warning in (s for s in shaped if isinstance(s, str)):
        stderr().print(f"[yellow]warning:[/] {markup(warning)}")
    every = [s for s in shaped if isinstance(s, ThreadRow)]
    rows = select(every, status=status, expired=expired, agent=agent)
    if as_json:
        for row in rows:
            _print_json(row.to_json())
        return EXIT_OK
    stderr().print(f"[dim]{len(rows)} of {len(every)} threads[/]")
    print_grid(stdout(), thread_grid(rows, now))
    return EXIT_OK


@app.callback(invoke_without_command=True)
def threads(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option(
        "--status", help="Only threads in this status: idle, running or interrupted.")] = None,
    expired: Annotated[bool, typer.Option(
        "--expired", help="Only threads with an open interrupt past its expiry.")] = False,
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only this agent's.")
                     ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="NDJSON: one object per thread.")
                       ] = False,
) -> None:
    """List threads with their status, open interrupts and oldest expiry."""
    if ctx.invoked_subcommand is not None:
        return
    if status is not None and status not in ("idle", "running", "interrupted"):
        stderr().print(f"[red]error:[/] --status {markup(repr(status))}: use idle, running or "
                       "interrupted")
        raise typer.Exit(2)
    settings = KafkaSettings()
    raise typer.Exit(run_command(lambda _stop: _list(settings, status, expired, agent, as_json)))


def _run_json(run: RunSummary) -> dict[str, Any]:
    return {"runId": run.run_id, "agent": run.agent, "parentRunId": run.parent_run_id,
            "startedAt": run.started_ms, "endedAt": run.ended_ms, "outcome": run.outcome,
            "interruptIds": run.interrupt_ids, "resume": run.resume, "events": run.events}


def show_json(found: ThreadRecords) -> dict[str, Any]:
    """``threads show --json``: state, runs, decisions and open interrupts in one object."""
    state = found.state
    return {
        "threadId": found.thread_id,
        "state": to_wire(state) if state else None,
        "runs": [_run_json(r)
                 for r in summarize_runs(found.events, found.run_events or None)],
        "decisions": [d.value for d in found.decisions],
        "openInterrupts": [to_wire(o) for o in state.open_interrupts] if state else [],
    }


def _state_line(found: ThreadRecords, now: datetime) -> Text:
    state = found.state
    if state is None:
        line = Text(safe_id(found.thread_id), style="bold")
        line.append(": no thread state (the gatekeeper has not recorded this thread)")
        return line
    line = Text(safe_id(state.thread_id), style="bold")
    line.append("  ")
    line.append(state.status, style=_STATUS_STYLE.get(state.status, "white"))
    line.append(f"  agent={safe_id(state.agent or '-')}  run={safe_id(state.run_id or '-')}  "
                f"updated {_ago(state.updated_at, now)}")
    if state.parent_run_id is not None:
        line.append(f"  child of {safe_id(parent_thread(state.thread_id))} (run "
                    f"{safe_id(state.parent_run_id)}): its interrupts are answered there")
    return line


def run_grid(found: ThreadRecords) -> Grid:
    """``threads show``'s runs: run, agent and interrupt ids printed whole."""
    grid = Grid([Column("run", ids=True), Column("agent", ids=True), Column("started"),
                 Column("ended"), Column("outcome"), Column("interrupts", ids=True),
                 Column("resumed with", ids=True), Column("events")])
    for run in summarize_runs(found.events, found.run_events or None):
        grid.add(run.run_id, run.agent or "-", clock(run.started_ms) if run.started_ms else "-",
                 clock(run.ended_ms) if run.ended_ms else "-", run.outcome,
                 id_list(run.interrupt_ids), id_list(run.resume),
                 str(run.events))
    return grid


def decision_grid(found: ThreadRecords) -> Grid:
    """``threads show``'s decisions: request and run ids printed whole."""
    grid = Grid([Column("time"), Column("request", ids=True), Column("run", ids=True),
                 Column("verdict"), Column("code"), Column("message")])
    for rec in found.decisions:
        body = rec.fields
        grid.add(clock(rec.timestamp_ms), str(body.get("requestId")),
                 str(body.get("runId") or "-"), str(body.get("verdict")),
                 str(body.get("code") or "-"), str(body.get("message", "")))
    return grid


def print_show(console: Console, found: ThreadRecords, now: datetime) -> None:
    """``threads show`` for a person: state line, runs, decisions, open interrupts."""
    console.print(_state_line(found, now), soft_wrap=True)
    for heading, grid in (("runs", run_grid(found)), ("decisions", decision_grid(found))):
        console.print(Text(f"{heading} ({len(grid.rows)})", style="bold"), soft_wrap=True)
        print_grid(console, grid)
    state = found.state
    opened = state.open_interrupts if state else []
    console.print(Text(f"open interrupts ({len(opened)})", style="bold"), soft_wrap=True)
    for item in opened:
        wire = to_wire(item.interrupt)
        console.print(interrupt_line(wire, now, indent="  "),
                      Text(f"run={safe_id(item.run_id)}", style="dim"), soft_wrap=True)
        if wire.get("responseSchema"):
            console.print("    responseSchema:")
            schema = safe_json(wire["responseSchema"])  # the agent's: inert on a terminal
            console.print(Padding(schema, (0, 0, 0, 6), expand=False))


async def settled(settings: KafkaSettings, found: ThreadRecords) -> ThreadState | None:
    """The thread's state, past the end of its running run when ``found.events`` holds it."""
    state = found.state
    if state is None or state.status != "running" or state.run_id is None:
        return state
    run_id = state.run_id
    ending = run_ending(found.events, run_id)
    limits = LimitSettings().limits
    if ending is None or boundary(ending, limits) is None:
        return state  # still running, or an end the gatekeeper cannot read either
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_S
    while loop.time() < deadline:
        latest = await read_state(settings, found.thread_id)
        if passed(latest, run_id):
            return latest
        await asyncio.sleep(SETTLE_POLL_S)
    return closed(state, ending, datetime.now(UTC), limits) or state


async def _show(settings: KafkaSettings, thread_id: str, as_json: bool,
                stop: asyncio.Event | None = None) -> int:
    with reading(f"thread {markup(thread_id)}") as progress:  # runs' starts and ends only
        found = await read_thread(settings, thread_id, event_types=BOUNDARIES, stop=stop,
                                  progress=progress)
    found.state = await settled(settings, found)
    for warning in found.warnings:
        stderr().print(f"[yellow]warning:[/] {markup(warning)}")
    if found.state is None and not found.events and not found.decisions:
        stderr().print(f"[red]unknown thread[/] {markup(thread_id)}: nothing on "
                       f"{markup(settings.topics.threads)}, {markup(settings.topics.events)} "
                       f"or {markup(settings.topics.decisions)}")
        return EXIT_REFUSED
    if as_json:
        _print_json(show_json(found))
    else:
        print_show(stdout(), found, datetime.now(UTC))
    return EXIT_OK


@app.command("show")
def show(
    thread_id: Annotated[str, typer.Argument(help="The thread id.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """A thread's runs, decisions and open interrupts (with their responseSchema)."""
    settings = KafkaSettings()

    async def body(stop: asyncio.Event) -> int:
        return await _show(settings, thread_id, as_json, stop)

    raise typer.Exit(run_command(body))
