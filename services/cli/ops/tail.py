"""``agui-relay tail``: follow a deployment's AG-UI events, live or from the past.

Reads ``events`` without a consumer group (nothing is committed, any number
of operators can tail at once). ``--thread`` reads only the partition the
thread's key maps to under Kafka's default murmur2 partitioner, so tailing
one thread costs one partition whatever the traffic. Without ``--thread``
the tail follows from now (the whole topic's past is unbounded); with it,
the thread's history comes first, read from the start of its partition
and filtered to the thread, since one thread is bounded and an operator
asking about one thread wants its story, then the tail follows.
``--since`` starts both at an instant instead. ``--decisions`` and
``--deadletter`` interleave those topics by timestamp. Pretty lines by
default (see ``render``), ``--json`` for NDJSON. ``--exit`` stops at the end
offsets captured at start (with ``--thread``: the history, then stop);
otherwise Ctrl-C stops cleanly.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from services.cli.ops.filters import RecordFilter, parse_since, split_types, to_epoch_ms
from services.cli.ops.kafka_io import (
    EXIT_ERROR,
    EXIT_OK,
    run_command,
    select_partitions,
    stderr,
    stdout,
)
from services.cli.ops.render import record_lines
from services.cli.ops.safe import markup
from services.kafka.reader import Start, TopicReader
from services.kafka.records import Deduper, OpsRecord, from_kafka
from services.runtime.settings import KafkaSettings


def start_of(from_beginning: bool, since: str | None, now: datetime,
             thread: str | None = None) -> Start:
    """Where to begin: ``--from-beginning``, ``--since``, or by default the end, except
    for one ``--thread``, whose bounded history is read from the beginning."""
    if from_beginning and since:
        raise ValueError("give either --from-beginning or --since, not both")
    if since:
        return Start.at(to_epoch_ms(parse_since(since, now)))
    if from_beginning or thread is not None:
        return Start.beginning()
    return Start.end()


def _where(start: Start) -> str:
    if start.kind == "beginning":
        return "from the beginning"
    if start.kind == "time":
        return "from --since"
    return "from now"


def emit(rec: OpsRecord, as_json: bool) -> None:
    """Print one record, pretty or as one NDJSON line."""
    if as_json:
        sys.stdout.write(rec.ndjson() + "\n")
        sys.stdout.flush()
        return
    console = stdout()
    for line in record_lines(rec, datetime.now(UTC)):
        console.print(line)


async def _tail(settings: KafkaSettings, wanted: list[tuple[str, str | None]], start: Start,
                keep: RecordFilter, as_json: bool, exit_at_end: bool, stop: asyncio.Event
                ) -> int:
    async with TopicReader(settings, "agui-relay-tail") as reader:
        partitions = await select_partitions(reader, wanted)
        ends = await reader.assign(partitions, start)
        chosen: dict[str, list[int]] = {}
        for tp in partitions:
            chosen.setdefault(tp.topic, []).append(tp.partition)
        where = ", ".join(markup(f"{topic}[{ps[0] if len(ps) == 1 else '*'}]")
                          for topic, ps in chosen.items())
        stderr().print(f"[dim]tail {where} {_where(start)}, "
                       f"{'until the end' if exit_at_end else 'following, Ctrl-C to stop'}[/]")
        deduper = Deduper()
        async for batch in reader.batches(until=ends if exit_at_end else None, stop=stop):
            for record in batch:
                rec = from_kafka(record, settings.topics)
                if keep.matches(rec) and deduper.fresh(rec):
                    emit(rec, as_json)
    return EXIT_OK


def tail(
    thread: Annotated[str | None, typer.Option(
        "--thread", "-t", help="Only this thread (reads just its partition), its history "
        "first.")] = None,
    run: Annotated[str | None, typer.Option("--run", "-r", help="Only this run.")] = None,
    types: Annotated[list[str] | None, typer.Option(
        "--type", help="Only these event types (repeatable or comma separated).")] = None,
    agent: Annotated[str | None, typer.Option(
        "--agent", "-a", help="Only this agent's runs.")] = None,
    from_beginning: Annotated[bool, typer.Option(
        "--from-beginning", help="Start at the oldest record kept (the default with "
        "--thread).")] = False,
    since: Annotated[str | None, typer.Option(
        "--since", help="Start at an ISO 8601 time or a duration ago (10m, 2h, 1d).")] = None,
    decisions: Annotated[bool, typer.Option(
        "--decisions", help="Interleave gatekeeper decisions.")] = False,
    deadletter: Annotated[bool, typer.Option(
        "--deadletter", help="Interleave dead letters.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="NDJSON: one object per record.")
                       ] = False,
    exit_at_end: Annotated[bool, typer.Option(
        "--exit", help="Stop at the end of what exists now instead of following (with "
        "--thread: print its history and stop).")] = False,
) -> None:
    """Follow AG-UI events (and decisions, dead letters), one line per record."""
    settings = KafkaSettings()
    try:
        start = start_of(from_beginning, since, datetime.now(UTC), thread)
    except ValueError as exc:
        stderr().print(f"[red]error:[/] {markup(exc)}")
        raise typer.Exit(EXIT_ERROR) from exc
    topics = settings.topics
    wanted: list[tuple[str, str | None]] = [(topics.events, thread)]
    if decisions:
        wanted.append((topics.decisions, thread))
    if deadletter:
        wanted.append((topics.deadletter, None))
    keep = RecordFilter(thread=thread, run=run, types=split_types(types or []), agent=agent)
    code = run_command(lambda stop: _tail(settings, wanted, start, keep, as_json,
                                          exit_at_end, stop))
    raise typer.Exit(code)
