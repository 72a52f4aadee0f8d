"""A setting the environment gets wrong is a short error naming it, not a traceback.

Every command reads its settings from the environment through pydantic-settings,
whose ``ValidationError`` would otherwise reach the user as a page of rich
traceback with the variable's name at the bottom. ``reporting_settings`` runs a
command and turns such an error into one line per variable on stderr and exit
status 2 (a usage error, as the CLI library's own). The values are not echoed: a
variable may hold a key or a secret.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from contracts.codec import validation_lines
from services.runtime.settings import ConfigurationError

USAGE_ERROR = 2


def reporting_settings(command: Callable[[], object]) -> None:
    """Run ``command``; a settings object that refuses the environment exits 2, explained."""
    try:
        command()
    except ConfigurationError as exc:
        console = Console(stderr=True, soft_wrap=True)
        console.print(f"[bold red]agui-relay: invalid configuration[/]: {escape(str(exc))}")
        raise SystemExit(USAGE_ERROR) from None
    except ValidationError as exc:
        if not exc.title.endswith("Settings"):  # not configuration: a defect, shown whole
            raise
        console = Console(stderr=True, soft_wrap=True)
        console.print(f"[bold red]agui-relay: invalid configuration[/] ({exc.title})")
        for line in validation_lines(exc):
            console.print(f"  {escape(line)}")
        raise SystemExit(USAGE_ERROR) from None
