"""What other clients and agents wrote never acts on the operator's terminal.

Ids, messages, reasons and codes come from the topics; each renderer shows
their control and bidi characters as escapes (``\\x1b``, ``\\u202e``) and
never reads a ``[...]`` in them as rich markup (``[/]`` alone crashed
``cancel``, ``stuck`` and ``deadletter show``). Checked on the bytes a real
terminal console writes. Durations too long for a date, and timeouts that
are not a positive number, are refused before anything is sent.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt
from rich.console import Console, RenderableType
from typer.testing import CliRunner

from contracts import OpenInterrupt, ThreadState
from services.cli.main import app
from services.cli.ops.columns import print_grid
from services.cli.ops.filters import parse_since
from services.cli.ops.render import event_lines, interrupt_line, record_lines
from services.cli.ops.safe import markup, safe, safe_id, safe_json
from services.cli.ops.stuck import parse_duration, report_grid
from services.cli.ops.threads import thread_grid
from services.cli.ops.threadview import row_of
from services.gatekeeper.census import examine
from services.kafka.records import OpsRecord

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOSTILE = "x\x1b]0;pwned\x07\x1b[2J\x1b]8;;http://evil/\x1b\\link\u202eevil\x9b31m[/][red]r[/red]"
INJECTED = ("\x1b]0;", "\x1b[2J", "\x1b]8;", "\u202e", "\x9b", "\x07")


def terminal(*renderables: RenderableType) -> str:
    """What a colour terminal would be sent."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=400)
    for renderable in renderables:
        console.print(renderable)
    return out.getvalue()


def assert_inert(written: str) -> None:
    for sequence in INJECTED:
        assert sequence not in written, repr(sequence)
    assert "\\x1b]0;pwned" in written  # shown, as an escape
    assert "[/][red]r[/red]" in written  # shown as typed, not read as markup


def test_safe_escapes_controls_and_bidi_and_leaves_text_alone() -> None:
    assert safe("café ✓ 漢字 plain") == "café ✓ 漢字 plain"
    assert safe("a\x1bb\x07c\x7fd\x9be\u202ef\u2066g\n") == (
        "a\\x1bb\\x07c\\x7fd\\x9be\\u202ef\\u2066g\\x0a")
    assert safe(None) == "None"
    assert markup("[/] \x1b") == "\\[/] \\x1b"


def test_tail_lines_show_hostile_ids_messages_and_codes_inert() -> None:
    headers = {"agui-run-id": HOSTILE, "agui-event-type": "RUN_FINISHED",
               "agui-agent": HOSTILE, "agui-seq": "3"}
    finished = {"type": "RUN_FINISHED", "threadId": HOSTILE, "runId": HOSTILE,
                "outcome": {"type": "interrupt", "interrupts": [
                    {"id": HOSTILE, "reason": HOSTILE, "message": HOSTILE,
                     "toolCallId": HOSTILE, "subagentRunId": HOSTILE,
                     "expiresAt": HOSTILE}]}}
    error = {"type": "RUN_ERROR", "message": HOSTILE, "code": HOSTILE}
    decision = {"requestId": HOSTILE, "threadId": HOSTILE, "verdict": "rejected",
                "code": HOSTILE, "message": HOSTILE, "interruptIds": [HOSTILE]}
    letter = {"sourceTopic": HOSTILE, "partition": 3, "offset": 9, "reason": HOSTILE,
              "code": HOSTILE, "service": HOSTILE}
    lines = [
        *event_lines(OpsRecord("p.events", "events", 0, 1, 0, HOSTILE, headers, finished), NOW),
        *event_lines(OpsRecord("p.events", "events", 0, 2, 0, HOSTILE,
                               {**headers, "agui-event-type": "RUN_ERROR"}, error), NOW),
        *record_lines(OpsRecord("p.decisions", "decisions", 0, 1, 0, HOSTILE, {}, decision),
                      NOW),
        *record_lines(OpsRecord("p.deadletter", "deadletter", 0, 0, 0, None, {}, letter), NOW),
        interrupt_line({"id": HOSTILE, "reason": HOSTILE}, NOW),
    ]
    assert_inert(terminal(*lines))


def hostile_state(status: str, **fields: Any) -> ThreadState:
    return ThreadState(thread_id=HOSTILE, status=status, agent=HOSTILE, run_id=HOSTILE,
                       updated_at=NOW, **fields)


def test_threads_and_stuck_tables_show_hostile_ids_inert() -> None:
    late = Interrupt(id=HOSTILE, reason="approval", expires_at="2026-03-01T11:00:00Z")
    waiting = hostile_state("interrupted", open_interrupts=[
        OpenInterrupt(run_id=HOSTILE, interrupt=late)])
    running = hostile_state("running", run_started_at=NOW - timedelta(hours=1))
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=400)
    print_grid(console, thread_grid([row_of(waiting, NOW), row_of(running, NOW)], NOW))
    assert_inert(out.getvalue())
    limit = timedelta(minutes=5)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=400)
    print_grid(console, report_grid(examine([waiting, running], NOW, limit)[1]))
    assert_inert(out.getvalue())


@pytest.mark.parametrize("text", ["99999999999d", "2000000d"])
def test_durations_too_long_for_a_date_are_refused_not_a_traceback(text: str) -> None:
    with pytest.raises(ValueError, match="year 1"):
        parse_since(text, NOW)
    with pytest.raises(ValueError, match="too long"):
        parse_duration("99999999999d")


@pytest.mark.parametrize("command", [
    ["cancel", "t-1", "r-1", "--follow", "--timeout", "-1"],
    ["cancel", "t-1", "r-1", "--follow", "--timeout", "nan"],
    ["resume", "t-1", "--cancel-all", "--timeout", "-5"],
    ["resume", "t-1", "--cancel-all", "--timeout", "0"],
])
def test_a_timeout_that_is_not_a_positive_number_is_refused_before_anything_is_sent(
        command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # nothing listens: no send
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert "give a number of seconds above 0" in result.output


def test_safe_shows_invisible_characters_so_no_id_passes_for_another() -> None:
    assert safe("alpha\u200b") == "alpha\\u200b"
    assert safe("a\u2060b\ufeffc\u00a0d\u3000e\U000e0041") == (
        "a\\u2060b\\ufeffc\\xa0d\\u3000e\\U000e0041")
    assert safe_id("a b\u200b") == "a\\x20b\\u200b"


def test_safe_json_escapes_raw_controls_and_stays_json() -> None:
    """rich's ``JSON`` (``ensure_ascii=False``) escapes only C0: a schema's or a dead
    letter's U+202E and C1 controls reached the terminal as they were."""
    value = {"title": "ok\u202egpj.exe\u0085", "d\u009b": ["\u009b2J", "é ✓", "\U000e0041"],
             "n": [1, None, True]}
    shown = safe_json(value)
    assert not [c for c in ("\u202e", "\u009b", "\u0085", "\U000e0041") if c in shown.plain]
    assert orjson.loads(shown.plain) == value  # escaped the JSON way: the same value
    assert "é ✓" in shown.plain
    written = terminal(shown)
    assert not [c for c in ("\u202e", "\x9b") if c in written]
