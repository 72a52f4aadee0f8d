"""``agui-relay deadletter``: the records no service could use, and why.

Lists the ``deadletter`` topic (every partition, oldest first, numbered) and
``show N`` prints one letter in full — by its number in the list or by
``PARTITION:OFFSET`` on the topic — with the reason, the code, the service
that refused it, where the record came from, its headers and the original
record itself (decoded from base64 when it was not text, pretty-printed
when it is JSON). What it prints was written by anyone who could write to a
topic: controls and invisible characters show as escapes (``safe``), and
the list prints its ids and positions whole at any width (``columns``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import sys
from typing import Annotated, Any

import orjson
import typer
from rich.padding import Padding
from rich.text import Text

from contracts.headers import ascii_int
from services.cli.ops.columns import Column, Grid, print_grid
from services.cli.ops.kafka_io import EXIT_ERROR, EXIT_OK, run_command, stderr, stdout
from services.cli.ops.render import clip
from services.cli.ops.safe import markup, safe, safe_json
from services.kafka.reader import TopicReader
from services.kafka.records import OpsRecord, from_kafka, parse_value
from services.runtime.settings import KafkaSettings

app = typer.Typer(help="Dead letters: records no service could use, with the reason.")


async def read_letters(settings: KafkaSettings) -> list[OpsRecord]:
    """Every dead letter, oldest first."""
    async with TopicReader(settings, "agui-relay-deadletter") as reader:
        records = await reader.read_all(await reader.all_partitions(settings.topics.deadletter))
    letters = [from_kafka(r, settings.topics) for r in records]
    return sorted(letters, key=lambda r: (r.timestamp_ms, r.partition, r.offset))


def original(letter: OpsRecord) -> Any:
    """The refused record's value: JSON when it parses, else text (or base64 as given)."""
    body = letter.fields
    value = body.get("value")
    if not isinstance(value, str):
        return value
    raw: bytes
    if body.get("valueEncoding") == "base64":
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return value
    else:
        raw = value.encode()
    return parse_value(raw)


def pick(letters: list[OpsRecord], which: str) -> OpsRecord | None:
    """The letter numbered ``which`` (1-based) or at ``PARTITION:OFFSET``."""
    if ":" in which:
        partition, _, offset = which.partition(":")
        at = (ascii_int(partition), ascii_int(offset))
        return next((r for r in letters if (r.partition, r.offset) == at), None)
    number = ascii_int(which)
    if number is not None and 1 <= number <= len(letters):
        return letters[number - 1]
    return None


def _json(letter: OpsRecord) -> str:
    return orjson.dumps({**letter.to_json(), "original": original(letter)}).decode()


def letter_grid(letters: list[OpsRecord]) -> Grid:
    """The list: number, position, service, source and code whole, the reason clipped."""
    grid = Grid([Column("#"), Column("at", ids=True), Column("failed at"),
                 Column("service", ids=True), Column("from", ids=True),
                 Column("code", ids=True), Column("reason")])
    for number, letter in enumerate(letters, 1):
        body = letter.fields
        grid.add(str(number), f"{letter.partition}:{letter.offset}",
                 str(body.get("failedAt", "-")), str(body.get("service", "-")),
                 f"{body.get('sourceTopic')}[{body.get('partition')}]@{body.get('offset')}",
                 str(body.get("code", "-")), Text(clip(str(body.get("reason", "")), 60)))
    return grid


async def _list(settings: KafkaSettings, as_json: bool) -> int:
    letters = await read_letters(settings)
    if as_json:
        for letter in letters:
            sys.stdout.write(_json(letter) + "\n")
        return EXIT_OK
    console = stdout()
    console.print(Text(f"{len(letters)} dead letters on {safe(settings.topics.deadletter)}",
                       style="bold"), soft_wrap=True)
    print_grid(console, letter_grid(letters))
    return EXIT_OK


@app.callback(invoke_without_command=True)
def deadletter(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="NDJSON: one object per letter.")
                       ] = False,
) -> None:
    """List dead letters, oldest first."""
    if ctx.invoked_subcommand is not None:
        return
    settings = KafkaSettings()
    raise typer.Exit(run_command(lambda _stop: _list(settings, as_json)))


async def _show(settings: KafkaSettings, which: str, as_json: bool) -> int:
    letters = await read_letters(settings)
    letter = pick(letters, which)
    if letter is None:
        stderr().print(f"[red]no dead letter {markup(repr(which))}[/]: give its number "
                       f"(1..{len(letters)}) or PARTITION:OFFSET")
        return EXIT_ERROR
    if as_json:
        sys.stdout.write(_json(letter) + "\n")
        return EXIT_OK
    body = letter.fields
    console = stdout()
    console.print(f"[bold]dead letter {letter.partition}:{letter.offset}[/] on "
                  f"{markup(letter.topic)}")
    console.print(f"  [bold red]{markup(body.get('code'))}[/]: {markup(body.get('reason'))}")
    console.print(f"  refused by {markup(body.get('service'))} at {markup(body.get('failedAt'))}")
    console.print(markup(f"  from {body.get('sourceTopic')} partition {body.get('partition')} "
                         f"offset {body.get('offset')}, key {body.get('key')!r}"))
    if body.get("headers"):
        console.print("  headers: " + markup(", ".join(f"{k}={v}"
                                                         for k, v in body["headers"].items())))
    console.print("  original record:")
    value = original(letter)
    if isinstance(value, str):
        console.print(f"    {safe(value)}", markup=False)
    else:
        console.print(Padding(safe_json(value), (0, 0, 0, 4), expand=False))
    return EXIT_OK


@app.command("show")
def show(
    which: Annotated[str, typer.Argument(help="The letter's number in the list, or "
                                         "PARTITION:OFFSET.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """One dead letter in full, with the original record."""
    settings = KafkaSettings()

    async def body(_stop: asyncio.Event) -> int:
        return await _show(settings, which, as_json)

    raise typer.Exit(run_command(body))
