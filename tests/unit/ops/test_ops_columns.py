"""Thread and run ids are printed whole: boxed in a terminal that fits them, plain otherwise."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from ag_ui.core import Interrupt
from rich.console import Console
from rich.text import Text

from contracts import OpenInterrupt, ThreadState
from contracts.headers import EVENT_TYPE, RUN_ID
from services.cli.ops.columns import Column, Grid, plain_lines, print_grid
from services.cli.ops.threads import print_show, thread_grid
from services.cli.ops.threadview import row_of
from services.kafka.records import OpsRecord
from services.kafka.thread_log import ThreadRecords

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BOX = set("─━│┃┏┓┗┛┌┐└┘├┤┬┴┼┡┩╇")
LONG_THREAD = "imm-448-" + "t" * 112
LONG_RUN = "run-448-" + "r" * 52
MID_THREAD = "imm-448-" + "m" * 28
MID_RUN = "run-448-" + "n" * 24


def terminal(width: int = 80) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=width, highlight=False), out


def pipe(width: int = 80) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, highlight=False), out


def state(thread_id: str, run_id: str, *interrupt_ids: str) -> ThreadState:
    return ThreadState(
        thread_id=thread_id, status="interrupted" if interrupt_ids else "idle",
        agent="approval", run_id=run_id, updated_at=datetime(2026, 11, 30, 11, tzinfo=UTC),
        open_interrupts=[OpenInterrupt(run_id=run_id, interrupt=Interrupt(
            id=i, reason="tool_approval", expires_at="2026-11-30T12:05:00Z"))
            for i in interrupt_ids])


def listing(*states: ThreadState) -> Grid:
    return thread_grid([row_of(s, NOW) for s in states], NOW)


def test_a_120_char_thread_id_in_an_80_column_terminal_is_printed_whole() -> None:
    console, out = terminal(80)
    print_grid(console, listing(state(LONG_THREAD, LONG_RUN, "approve-1"),
                                state("t-short", "r-short")))
    text = out.getvalue()
    assert LONG_THREAD in text
    assert LONG_RUN in text
    assert "…" not in text
    assert not BOX & set(text)  # too narrow for a box: plain lines the terminal wraps


def test_ids_that_fit_stay_whole_in_the_boxed_table_the_other_columns_fold() -> None:
    console, out = terminal(150)  # narrower than the table's natural width (159)
    grid = listing(state(MID_THREAD, MID_RUN, "approve-1", "approve-2", "approve-3"))
    print_grid(console, grid)
    text = Text.from_ansi(out.getvalue()).plain
    assert BOX & set(text)
    assert MID_THREAD in text
    assert MID_RUN in text
    assert "approve-1, approve-2, approve-3" in text
    assert "expires" in text
    assert "expires in 5m" not in text  # a column that is not ids folded to fit
    assert all(len(line) <= 150 for line in text.splitlines())


def test_piped_output_is_aligned_plain_columns_whatever_the_width() -> None:
    console, out = pipe(40)
    print_grid(console, listing(state(LONG_THREAD, LONG_RUN, "approve-1"),
                                state("t-short", "r-short")))
    header, *rows = out.getvalue().splitlines()
    assert not BOX & set(out.getvalue())
    assert "\x1b" not in out.getvalue()
    assert header.startswith("THREAD")
    assert [r.split()[0] for r in rows] == [LONG_THREAD, "t-short"]
    run_at = header.index("RUN")
    assert [r[run_at:].split()[0] for r in rows] == [LONG_RUN, "r-short"]
    assert all(line == line.rstrip() for line in (header, *rows))


def test_cells_are_text_never_markup_or_emoji() -> None:
    console, out = pipe()
    grid = Grid([Column("thread", ids=True), Column("note")])
    grid.add("t[bold]x[/bold]:smile:", "two\nlines")
    print_grid(console, grid)
    assert out.getvalue().splitlines()[1] == "t[bold]x[/bold]:smile:   two lines"


def test_plain_lines_pad_by_cell_width_and_rows_must_fill_the_columns() -> None:
    grid = Grid([Column("a"), Column("b")])
    grid.add("⏸⏸", "x")
    grid.add("abcdef", "y")
    assert [line.plain for line in plain_lines(grid)] == ["A        B", "⏸⏸       x",
                                                           "abcdef   y"]
    with pytest.raises(ValueError, match="2 columns"):
        grid.add("only one")


def event(ts: int, kind: str, run_id: str) -> OpsRecord:
    return OpsRecord("p.events", "events", 0, ts, ts, LONG_THREAD,
                     {RUN_ID: run_id, EVENT_TYPE: kind}, {"type": kind})


@pytest.mark.parametrize("make", [terminal, pipe])
def test_threads_show_prints_its_ids_whole_at_80_columns(make: object) -> None:
    assert callable(make)
    console, out = make(80)
    decision = OpsRecord("p.decisions", "decisions", 0, 9, 9, LONG_THREAD, {}, {
        "requestId": "req-" + "q" * 70, "runId": LONG_RUN, "verdict": "admitted",
        "message": "new run on idle thread"})
    found = ThreadRecords(LONG_THREAD, state(LONG_THREAD, LONG_RUN, "approve-1"),
                          events=[event(1, "RUN_STARTED", LONG_RUN),
                                  event(2, "RUN_FINISHED", LONG_RUN)],
                          decisions=[decision])
    print_show(console, found, NOW)
    text = Text.from_ansi(out.getvalue()).plain
    assert LONG_THREAD in text.splitlines()[0]
    assert sum(LONG_RUN in line for line in text.splitlines()) >= 3  # state, run, decision
    assert "req-" + "q" * 70 in text
    assert "…" not in text


@pytest.mark.parametrize("width", [130, 160])
def test_an_id_cell_of_several_words_is_measured_whole_and_never_cut(width: int) -> None:
    """A list of ids or a command (``stuck``'s "cancel with") is one cell of several
    words: rich measures such a cell by its longest word, so a table judged to fit was
    drawn wider than the terminal and the command cut at its edge."""
    command = "agui-relay resume " + "y" * 40 + " --cancel-all"
    grid = Grid([Column("thread", ids=True), Column("status"), Column("cancel with", ids=True)])
    grid.add("x" * 60, "interrupted", Text(command))
    console, out = terminal(width)
    print_grid(console, grid)
    text = Text.from_ansi(out.getvalue()).plain
    assert command in " ".join(text.replace("│", " ").split())
    if BOX & set(text):
        assert all(len(line) <= width for line in text.splitlines()), text
    assert "interrupted" in text
