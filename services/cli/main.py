"""The ``agui-relay`` root command: wires each command group's module.

Each command lives in its own module and receives its settings from the
environment through its own pydantic-settings object; this file only wires.
"""

from __future__ import annotations

import typer

from services.cli import broker, consumer, gatekeeper, notifier, producer, topics, up
from services.cli.environment import warn_about_environment
from services.cli.ops import app as ops
from services.cli.settings_errors import reporting_settings

app = typer.Typer(
    name="agui-relay",
    help="AG-UI 1.0 runs over Apache Kafka, with interrupt/resume rules enforced centrally.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
SERVICES = frozenset({"gatekeeper", "producer", "consumer", "notifier"})
"""Commands that configure their logs and warn there (``warn_about_environment``)."""


@app.callback()
def _root(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand not in SERVICES:
        warn_about_environment()


app.command("up")(up.up)
app.command("gatekeeper")(gatekeeper.gatekeeper)
app.command("producer")(producer.producer)
app.command("consumer")(consumer.consumer)
app.command("notifier")(notifier.notifier)
app.add_typer(topics.app, name="topics")
app.add_typer(broker.app, name="kafka")
ops.register(app)


def main() -> None:
    """Console-script entry point (a setting the environment gets wrong: exit 2, explained)."""
    reporting_settings(app)


if __name__ == "__main__":
    main()
