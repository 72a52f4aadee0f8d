"""``agui-relay cancel THREAD [RUN]``: ask the workers to stop a run.

Writes a ``ControlCommand`` to ``control`` keyed by the thread (so it lands
on the partition of the worker that owns the thread). Without RUN it cancels
the thread's current run as the gatekeeper last recorded it, and refuses
when the thread is not running (an interrupted thread is moved on by a
resume that cancels its interrupts, not by a cancel). ``--follow`` waits for
the run's terminal event, which the producer writes (``cancelled``).
"""

from __future__ import annotations

import asyncio
import getpass
import socket
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.markup import escape

from contracts import ControlCommand, encode
from contracts.codec import to_wire
from services.cli.ops.command_line import UNTYPABLE, command_line
from services.cli.ops.kafka_io import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    publish,
    run_command,
    select_partitions,
    stderr,
    stdout,
)
from services.cli.ops.safe import markup
from services.cli.ops.tail import emit
from services.cli.ops.watch import Watcher
from services.kafka.reader import Start, TopicReader
from services.kafka.records import OpsRecord
from services.kafka.thread_log import read_state
from services.runtime.settings import KafkaSettings


def requested_by() -> str:
    """Who asked, for the audit trail: ``agui-relay:user@host``."""
    try:
        user = getpass.getuser()
    except OSError:
        user = "unknown"
    return f"agui-relay:{user}@{socket.gethostname()}"


def _pasted(line: str | None, more: str = "") -> str:
    """A command to paste, as markup: its words a shell's already, exact and inert."""
    return escape(line + more) if line else f"none ({UNTYPABLE})"


async def _current_run(settings: KafkaSettings, thread_id: str) -> str | None:
    state = await read_state(settings, thread_id)
    if state is None:
        stderr().print(f"[red]refused:[/] thread {markup(thread_id)} has no state on "
                       f"{markup(settings.topics.threads)}; name the run: "
                       f"{_pasted(command_line('cancel', thread_id), ' RUN')}")
        return None
    if state.status != "running" or state.run_id is None:
        resume = command_line("resume", thread_id, options=["--cancel-all"])
        hint = (f"; to move past its open interrupts: {_pasted(resume)}"
                if state.status == "interrupted" else "")
        stderr().print(f"[red]refused:[/] thread {markup(thread_id)} is {state.status}, no run to "
                       f"cancel{hint}")
        return None
    return state.run_id


async def _cancel(settings: KafkaSettings, thread_id: str, run_id: str | None, follow: bool,
                  as_json: bool, within_s: float, stop: asyncio.Event) -> int:
    run_id = run_id or await _current_run(settings, thread_id)
    if run_id is None:
        return EXIT_REFUSED
    command = ControlCommand(thread_id=thread_id, run_id=run_id, requested_by=requested_by(),
                             requested_at=datetime.now(UTC))
    topics = settings.topics
    async with TopicReader(settings, "agui-relay-cancel") as reader:
        await reader.assign(await select_partitions(reader, [(topics.events, thread_id)]),
                            Start.end())
        watcher = Watcher(reader, settings, stop, lambda rec: emit(rec, as_json))
        try:
            partition, offset = await publish(settings, topics.control, thread_id,
                                              encode(command))
            if as_json:
                sys.stdout.write(OpsRecord(topics.control, "control", partition, offset,
                                           int(command.requested_at.timestamp() * 1000),
                                           thread_id, {}, to_wire(command)).ndjson() + "\n")
            else:
                stdout().print(f"cancel sent for run [cyan]{markup(run_id)}[/] of thread "
                               f"[bold]{markup(thread_id)}[/] "
                               f"({markup(topics.control)}[{partition}]@{offset})")
            if follow and await watcher.run_end(thread_id, run_id, within_s) is None:
                if stop.is_set():
                    stderr().print(f"[yellow]stopped[/] (Ctrl-C) before run {markup(run_id)} "
                                   "closed; the cancel was sent")
                    return EXIT_INTERRUPTED
                stderr().print(f"[yellow]run {markup(run_id)} did not close within "
                               f"{within_s:g}s[/] (is a producer worker running it?)")
                return EXIT_ERROR
        finally:
            await watcher.close()
    return EXIT_OK


def cancel(
    thread_id: Annotated[str, typer.Argument(help="The thread.")],
    run_id: Annotated[str | None, typer.Argument(
        help="The run to stop (default: the thread's current run).")] = None,
    follow: Annotated[bool, typer.Option(
        "--follow", help="Wait for the run's terminal event and show it.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="NDJSON records.")] = False,
    within_s: Annotated[float, typer.Option(
        "--timeout", help="Seconds to wait with --follow.")] = 30.0,
) -> None:
    """Cancel a running run (the producer ends it with the cancelled outcome)."""
    settings = KafkaSettings()
    if not 0 < within_s < float("inf"):  # also refuses nan: checked before anything is sent
        stderr().print(f"[red]error:[/] --timeout {within_s}: give a number of seconds above 0")
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(run_command(lambda stop: _cancel(settings, thread_id, run_id, follow,
                                                      as_json, within_s, stop)))
