"""What an operator typed, and ids other clients chose, printed back as they are.

``[`` and ``]`` are ordinary in what an operator types (a JSON array, a
path) and in ids another client chose; printed inside an f-string with rich
markup on they were read as tags: ``[/]`` or ``[/tmp/x]`` was a
``MarkupError`` with a page of traceback, ``[a,b]`` silently disappeared.
Plain columns are the form "for pipes, files, grep and awk": an id holding
spaces or an invisible character must not forge a column or pass for
another thread's id.
"""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime

import pytest
from rich.console import Console
from typer.testing import CliRunner

from contracts import ThreadState
from services.cli.main import app
from services.cli.ops.columns import plain_lines
from services.cli.ops.kafka_io import EXIT_ERROR, run_command
from services.cli.ops.threads import thread_grid
from services.cli.ops.threadview import row_of
from services.kafka.clients import KafkaError

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("command", [
    ["threads", "--status", "[/]"],
    ["stuck", "--running-longer-than", "[/]"],
    ["tail", "--since", "[/]"],
    ["resume", "t-1", "--resolve", "[/]"],
    ["resume", "t-1", "--resolve", "files=[/tmp/x]"],  # a path list typed unquoted
])
def test_operator_input_with_brackets_is_refused_in_words_not_a_markup_traceback(
        command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # refused before any I/O
    result = CliRunner().invoke(app, command)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}")
    assert result.exit_code == 2, result.output
    assert "[/" in result.output  # the value quoted back as typed


def test_the_answer_an_operator_typed_is_shown_as_typed_when_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--resolve pick=[a,b]`` (not JSON): the error quotes the answer; ``[a,b]`` was read
    as a style tag and vanished, so the line said the answer was ``''``."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    result = CliRunner().invoke(app, ["resume", "t-1", "--resolve", "pick=[a,b]"])
    assert result.exit_code == 2
    assert "[a,b]" in result.output, result.output


def test_a_broker_error_quoting_brackets_is_one_line_not_a_markup_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The errors ``run_command`` reports quote what the client library said, which may
    name a ``[/]`` topic or a bracketed IPv6 address."""
    async def body(_stop: asyncio.Event) -> int:
        raise KafkaError("no route to [/] at [::1]:9092")

    assert run_command(body) == EXIT_ERROR
    assert "no route to [/] at [::1]:9092" in capsys.readouterr().err


def test_plain_columns_cannot_be_forged_by_an_id_holding_spaces_or_invisible_text() -> None:
    """Thread ids are the client's (POST /agents/{agent} accepts both of these). One with
    runs of spaces printed as extra columns (``awk '{print $2}'`` read ``interrupted`` for
    an idle thread); one ending in U+200B ZERO WIDTH SPACE printed exactly as ``alpha``
    does, so an operator copying or typing ``alpha`` acted on another thread."""
    forged = "victim   interrupted   approval   run-9   approve-1"
    twins = ["alpha\u200b", "alpha\u2060", "alpha\ufeff", "alpha\u00a0", "alpha ", "alpha"]
    states = [ThreadState(thread_id=t, status="idle", agent="scripted", run_id="run-1",
                          updated_at=NOW) for t in (forged, *twins)]
    out = io.StringIO()
    console = Console(file=out, width=300, force_terminal=False)
    for line in plain_lines(thread_grid([row_of(s, NOW) for s in states], NOW)):
        console.print(line, soft_wrap=True, crop=False)
    rows = out.getvalue().splitlines()[1:]
    shown = [row.split()[0] for row in rows]
    assert len(set(shown)) == len(states), f"two threads print alike: {shown}"
    assert all(row.split()[1] == "idle" for row in rows), rows
    assert shown[0] == "victim\\x20\\x20\\x20interrupted\\x20\\x20\\x20approval\\x20\\x20\\x20" \
                       "run-9\\x20\\x20\\x20approve-1"
    assert shown[1:] == ["alpha\\u200b", "alpha\\u2060", "alpha\\ufeff", "alpha\\xa0",
                         "alpha\\x20", "alpha"]


def test_kafka_up_help_shows_the_controller_ports_default() -> None:
    """``[default: PORT+1]`` in the help was read as a style tag and vanished."""
    result = CliRunner().invoke(app, ["kafka", "up", "--help"], env={"COLUMNS": "200"})
    assert "default: PORT+1" in result.output, result.output
