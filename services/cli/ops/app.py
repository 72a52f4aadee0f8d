"""Wire the operator commands onto a Typer app (the root CLI's and our own).

``register(app)`` is the single place that names the commands, so the root
``agui-relay`` and ``python -m services.cli.ops`` (used by the tests while
the root CLI is assembled) expose exactly the same thing.
"""

from __future__ import annotations

import typer

from services.cli.environment import warn_about_environment
from services.cli.ops import (
    audit,
    cancel,
    deadletter,
    demo,
    lag,
    resume,
    state,
    stuck,
    tail,
    threads,
)


def register(app: typer.Typer) -> None:
    """Add ``tail``, ``threads``, ``resume``, ``cancel``, ``deadletter``, ``lag``, ``stuck``,
    ``audit``, ``state``, ``demo``."""
    app.command("tail")(tail.tail)
    app.add_typer(threads.app, name="threads")
    app.command("resume")(resume.resume)
    app.command("cancel")(cancel.cancel)
    app.add_typer(deadletter.app, name="deadletter")
    app.command("lag")(lag.lag)
    app.command("stuck")(stuck.stuck)
    app.command("audit")(audit.audit_command)
    app.command("state")(state.state)
    app.command("demo")(demo.demo)


def build() -> typer.Typer:
    """A stand-alone app with only the operator commands."""
    app = typer.Typer(name="agui-relay", help="agui-relay operator commands.",
                      no_args_is_help=True, pretty_exceptions_show_locals=False)
    app.callback()(_root)
    register(app)
    return app


def _root() -> None:
    """agui-relay operator commands: tail, threads, resume, cancel, deadletter, lag, stuck,
    audit, state, demo."""
    warn_about_environment()
