"""The launcher's exception tree and the two ways it talks to a person.

Every failure the launcher can report is a ``LauncherError`` whose message
says what to do (fetch the jars, free a port, read the log tail it carries)::

    LauncherError
    ├── FetchError   the broker jars could not be fetched or are incomplete
    └── BrokerError  a broker (or a cluster node) could not be formatted,
                     started or stopped

Progress goes to stderr (``say``) so commands that print a bootstrap address
on stdout stay scriptable; ``last_lines`` keeps messages to a log's tail.
"""

from __future__ import annotations

import sys

TAIL_LINES = 40


class LauncherError(RuntimeError):
    """Base class for launcher failures; the message says what to do."""


class FetchError(LauncherError):
    """The broker jars could not be fetched or are incomplete."""


class BrokerError(LauncherError):
    """The broker could not be formatted, started or stopped."""


def say(quiet: bool, message: str) -> None:
    """Print a progress line on stderr unless ``quiet``."""
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def last_lines(text: str, n: int = TAIL_LINES) -> str:
    """The last ``n`` lines of ``text`` (a log or a tool's output, for a message)."""
    return "\n".join(text.splitlines()[-n:])
