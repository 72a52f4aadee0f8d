"""Tables of ids an operator copies: every id whole, boxed in a terminal, plain in a pipe.

The ``threads`` tables exist so an operator can copy a thread id or a run
id into ``resume`` or ``cancel``; a table that folds or ellipsizes an id
(rich's way of fitting a narrow terminal) defeats them. A ``Grid`` names
its columns and which of them hold ids, and ``print_grid`` prints it: as a rich
table when the console is a terminal wide enough to hold every id on one
line (the id columns never wrap, the others fold to fit), and otherwise as
plain columns aligned with spaces under upper-case headers, with no box
drawing, like ``kubectl get``: the form for pipes, files, ``grep`` and
``awk``, and for a terminal too narrow for the ids (it wraps the long
lines, which leaves each id in one piece to copy). Cells are ``Text``, so
an id is never read as rich markup, and an id column's cells are always one
word each: an id's spaces show as ``\\x20`` and its invisible characters as
escapes (``safe_id``), so an id cannot pass for several columns (or for
another id) to a reader or to ``awk``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from copy import copy
from dataclasses import dataclass, field, replace

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from services.cli.ops.safe import safe, safe_id

GAP = 3
"""Spaces between plain columns, as ``kubectl get`` leaves."""


@dataclass(frozen=True, slots=True)
class Column:
    """A column's header, and whether it holds ids (printed whole, never wrapped)."""

    header: str
    ids: bool = False


@dataclass(slots=True)
class Grid:
    """Rows of cells under named columns."""

    columns: Sequence[Column]
    rows: list[tuple[Text, ...]] = field(default_factory=list)

    def add(self, *cells: str | Text) -> None:
        """Append a row; plain strings become unstyled ``Text`` on one line, one id each in
        an id column (several: ``id_list``)."""
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells under {len(self.columns)} columns")
        self.rows.append(tuple(
            c if isinstance(c, Text)
            else Text(safe_id(c) if column.ids else safe(" ".join(c.splitlines())))
            for column, c in zip(self.columns, cells, strict=True)))


def id_list(ids: Iterable[str]) -> Text:
    """Several ids in one cell, comma separated, each one word (``-`` for none)."""
    return Text(", ".join(safe_id(i) for i in ids) or "-")


def table_of(grid: Grid) -> Table:
    """The rich table: id columns never wrap and are as wide as their widest cell or
    header (rich measures a cell of several words, ``a, b`` or a command, by its longest
    word, then cut it), the others fold rather than cut, never narrower than their
    header's longest word (a status folded one letter a line)."""
    table = Table()
    for i, column in enumerate(grid.columns):
        if column.ids:
            least = max([len(column.header), *(row[i].cell_len for row in grid.rows)])
        else:
            least = max(len(word) for word in column.header.split())
        table.add_column(column.header, no_wrap=column.ids, overflow="fold", min_width=least)
    for row in grid.rows:
        table.add_row(*row)
    return table


def plain_lines(grid: Grid) -> list[Text]:
    """Upper-case headers and rows, each column padded to its widest cell."""
    header = tuple(Text(c.header.upper()) for c in grid.columns)
    lines = [header, *grid.rows]
    widths = [max(line[i].cell_len for line in lines) for i in range(len(grid.columns))]
    out: list[Text] = []
    for line in lines:
        text = Text()
        for i, cell in enumerate(line):
            text.append_text(cell)
            if i < len(line) - 1:
                text.append(" " * (widths[i] - cell.cell_len + GAP))
        text.rstrip()
        out.append(text)
    return out


def fits(console: Console, table: Table) -> bool:
    """True when ``table`` with its id columns whole fits the console's width, the other
    columns folded down to their least width (a header's longest word)."""
    folded = copy(table)
    folded.columns = [c if c.no_wrap else replace(c, max_width=c.min_width)
                      for c in table.columns]
    unbounded = console.options.update(width=1 << 20, max_width=1 << 20)
    return Measurement.get(console, unbounded, folded).minimum <= console.width


def print_grid(console: Console, grid: Grid) -> None:
    """Print ``grid`` boxed when the console is a terminal that fits it, else plain."""
    if console.is_terminal:
        table = table_of(grid)
        if fits(console, table):
            console.print(table)
            return
    for line in plain_lines(grid):
        console.print(line, soft_wrap=True, crop=False)
