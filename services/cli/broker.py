"""``agui-relay kafka up|down|status``: the local development broker.

A thin face over ``deploy.kafka.launcher`` (which the Makefile and the test
fixture use too): the broker is fetched from Maven Central on first use and
runs on the JDK at 127.0.0.1:9092 with its data in ``.run/kafka``.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from deploy.kafka import launcher

app = typer.Typer(help="Run the local Apache Kafka broker (fetched from Maven Central).",
                  no_args_is_help=True)
console = Console(stderr=True)

DirOption = typer.Option(launcher.DEFAULT_RUN_DIR, "--dir", help="Broker data directory.")


@app.command()
def up(
    data_dir: Path = DirOption,
    port: int = typer.Option(launcher.DEFAULT_PORT, help="Client port on 127.0.0.1."),
) -> None:
    """Fetch the jars if needed and start the broker in the background (idempotent)."""
    running = launcher.status(data_dir)
    if running is not None:
        console.print(f"Kafka already running on [bold]{running.bootstrap}[/] (pid {running.pid})")
        return
    try:
        launcher.fetch()
        launcher.start(data_dir, port, launcher.DEFAULT_CONTROLLER_PORT, persistent=True)
    except launcher.LauncherError as exc:
        console.print(f"[red]Kafka did not start:[/] {exc}")
        raise typer.Exit(1) from exc


@app.command()
def down(data_dir: Path = DirOption) -> None:
    """Stop the broker recorded in the data directory."""
    if launcher.stop_dir(data_dir):
        console.print("Kafka stopped")
    else:
        console.print("No broker was running")


@app.command()
def status(data_dir: Path = DirOption) -> None:
    """Say whether the broker is running and where (exit 1 when it is not)."""
    running = launcher.status(data_dir)
    if running is None:
        console.print("Kafka is not running")
        raise typer.Exit(1)
    console.print(f"Kafka {running.version} running on [bold]{running.bootstrap}[/] "
                  f"(pid {running.pid}, data {running.data_dir})")
