"""Command lines the operator commands print for an operator to paste into a shell.

The ids in one are a client's or an agent's, any JSON string: each is one exact,
inert shell word (``shell_word``); the positional ones follow ``--``, so a thread
``-rf`` is not read as options, with every option before them; an option's value is
joined to it (``--cancel=ID``), so an id starting with ``-`` stays its value. An id
no argument can carry (a NUL: ``typable``) makes no command at all, rather than one
that, pasted, names another id. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.cli.ops.safe import shell_word, typable

PROGRAM = "agui-relay"

UNTYPABLE = "no command can name it: its id holds a NUL, which no argument carries"
"""Said in place of a command that would need such an id."""


def option(name: str, value: str) -> str | None:
    """``NAME=VALUE`` as one shell word; None when no argument can carry ``value``."""
    return f"{name}={shell_word(value)}" if typable(value) else None


def command_line(subcommand: str, *ids: str, options: Sequence[str] = ()) -> str | None:
    """``agui-relay SUBCOMMAND OPTIONS -- IDS``; None when no argument can carry an id.
    ``options`` are words already (``--cancel-all``, ``option``'s)."""
    if not all(typable(i) for i in ids):
        return None
    return " ".join([PROGRAM, subcommand, *options, "--", *(shell_word(i) for i in ids)])
