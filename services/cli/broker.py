"""``agui-relay kafka up|down|status``: the local development broker, or a local cluster.

A thin face over ``deploy.kafka.launcher`` (which the Makefile and the test
fixture use too): the broker is fetched from Maven Central on first use and
runs on the JDK at 127.0.0.1:9092 with its data in ``.run/kafka``.
``up --brokers 3`` runs a three-node KRaft cluster instead (each node broker
and controller in its own JVM, node i on 9092+2i with its controller on
9093+2i); ``down`` stops every node and ``status`` lists them.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from deploy.kafka import launcher

app = typer.Typer(help="Run the local Apache Kafka broker or cluster (fetched from Maven Central).",
                  no_args_is_help=True)
console = Console(stderr=True)

DirOption = typer.Option(launcher.DEFAULT_RUN_DIR, "--dir", help="Broker data directory.")


@app.command()
def up(
    data_dir: Path = DirOption,
    port: int = typer.Option(launcher.DEFAULT_PORT,
                             help="Client port on 127.0.0.1 (a cluster's node i: PORT+2i)."),
    brokers: int = typer.Option(1, min=1, help="Nodes: 1 broker, or 3 for a replicated cluster."),
    controller_port: int | None = typer.Option(
        None, help="One broker's controller port on 127.0.0.1 (default: PORT+1)."),
) -> None:
    """Fetch the jars if needed and start the broker(s) in the background (idempotent)."""
    if brokers > 1:
        if controller_port is not None:
            console.print("[red]--controller-port is for one broker:[/] a cluster's node i "
                          "uses PORT+2i and PORT+2i+1")
            raise typer.Exit(2)
        _up_cluster(data_dir, port, brokers)
        return
    cluster = launcher.recorded_cluster(data_dir)
    if cluster is not None and any(node.alive() for node in cluster.nodes):
        console.print(f"[red]A cluster of {len(cluster.nodes)} runs in {escape(str(data_dir))}:[/] "
                      f"`kafka up --brokers {len(cluster.nodes)}` or `kafka down` first")
        raise typer.Exit(1)
    running = launcher.status(data_dir)
    if running is not None:
        console.print(f"Kafka already running on [bold]{escape(running.bootstrap)}[/] "
                      f"(pid {running.pid})")
        return
    try:
        launcher.fetch()
        launcher.start(data_dir, port, controller_port or port + 1, persistent=True)
    except launcher.LauncherError as exc:
        console.print(f"[red]Kafka did not start:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc


def _up_cluster(data_dir: Path, port: int, brokers: int) -> None:
    try:
        launcher.fetch()
        cluster, restarted = launcher.up_cluster(data_dir.resolve(), brokers, base_port=port)
    except launcher.LauncherError as exc:
        console.print(f"[red]The Kafka cluster did not start:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    if restarted:
        console.print(f"Started node(s) {', '.join(str(i + 1) for i in restarted)} again")
    console.print(f"Kafka {escape(cluster.version)} cluster of {brokers} on "
                  f"[bold]{escape(cluster.bootstrap)}[/]")
    _print_nodes(cluster)


def _print_nodes(cluster: launcher.Cluster) -> list[str]:
    colours = {"running": "green", "not answering": "yellow", "stopped": "red"}
    report = cluster.report()
    for state, line in report:
        console.print(f"  [{colours.get(state, 'red')}]{escape(line)}[/]", highlight=False,
                      soft_wrap=True)
    return [state for state, _ in report]


@app.command()
def down(data_dir: Path = DirOption) -> None:
    """Stop the broker (or every node of the cluster) recorded in the data directory."""
    cluster = launcher.recorded_cluster(data_dir)
    if cluster is not None and cluster.stop():
        console.print(f"Kafka cluster of {len(cluster.nodes)} stopped")
    elif launcher.stop_dir(data_dir):
        console.print("Kafka stopped")
    else:
        console.print("No broker was running")


@app.command()
def status(data_dir: Path = DirOption) -> None:
    """Say whether the broker or cluster runs and where (exit 1 when not, or a node is down)."""
    cluster = launcher.recorded_cluster(data_dir)
    if cluster is not None and any(node.alive() for node in cluster.nodes):
        console.print(f"Kafka {escape(cluster.version)} cluster of {len(cluster.nodes)} on "
                      f"[bold]{escape(cluster.bootstrap)}[/]")
        if any(state != "running" for state in _print_nodes(cluster)):
            raise typer.Exit(1)
        return
    running = launcher.status(data_dir)
    if running is None:
        console.print("Kafka is not running")
        raise typer.Exit(1)
    console.print(f"Kafka {escape(running.version)} running on "
                  f"[bold]{escape(running.bootstrap)}[/] "
                  f"(pid {running.pid}, data {escape(str(running.data_dir))})")
