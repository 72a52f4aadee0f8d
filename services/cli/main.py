"""The ``agui-relay`` root command: wires each command group's module.

Each command lives in its own module and receives its settings from the
environment through its own pydantic-settings object; this file only wires.
"""

from __future__ import annotations

import typer

from services.cli import broker, topics, up

app = typer.Typer(
    name="agui-relay",
    help="AG-UI 1.0 runs over Apache Kafka, with interrupt/resume rules enforced centrally.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(broker.app, name="kafka")
app.add_typer(topics.app, name="topics")
app.command("up")(up.up)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
