"""Fetch and run a real Apache Kafka broker (KRaft) on 127.0.0.1, or a local cluster.

Why this exists: the project's machines have no Docker and no packaged Kafka,
so the broker comes from Maven Central as jars (``deploy/kafka/pom.xml``) and
runs on the local JDK. The Makefile, the CLI and the pytest fixture all use
this module, which is the launcher's public face (the work is done by
``jars``, ``probe``, ``processes``, ``config``, ``jvm``, ``records``,
``broker``, ``cluster`` and ``cluster_start`` next to it) and its command
line. The whole package imports only the standard library because it runs
before the virtualenv has any dependencies.

    python -m deploy.kafka.launcher fetch|up|down|status [--dir .run/kafka] [--port 9092]
    python -m deploy.kafka.launcher up --brokers 3     # 3 nodes: 9092/9093, 9094/9095, 9096/9097
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from deploy.kafka.broker import start, status, stop_dir
from deploy.kafka.cluster import NODE_HEAP, Cluster, Node, recorded_cluster
from deploy.kafka.cluster_start import start_cluster, up_cluster
from deploy.kafka.config import choose_ports as _choose_ports
from deploy.kafka.defaults import (
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_PORT,
    DEFAULT_RUN_DIR,
    HOST,
    KAFKA_DIR,
    REPO_ROOT,
    STARTED_MARKER,
)
from deploy.kafka.errors import BrokerError, FetchError, LauncherError
from deploy.kafka.jars import LIB_DIR, POM, check_jars, fetch, jar_version, lib_dir
from deploy.kafka.probe import Metadata, PartitionInfo, answers, api_versions, free_port, metadata
from deploy.kafka.processes import alive
from deploy.kafka.records import Broker, forget, recorded

__all__ = [
    "DEFAULT_CONTROLLER_PORT",
    "DEFAULT_PORT",
    "DEFAULT_RUN_DIR",
    "HOST",
    "KAFKA_DIR",
    "LIB_DIR",
    "NODE_HEAP",
    "POM",
    "REPO_ROOT",
    "STARTED_MARKER",
    "Broker",
    "BrokerError",
    "Cluster",
    "FetchError",
    "LauncherError",
    "Metadata",
    "Node",
    "PartitionInfo",
    "_choose_ports",
    "answers",
    "api_versions",
    "check_jars",
    "fetch",
    "free_port",
    "jar_version",
    "lib_dir",
    "main",
    "metadata",
    "recorded_cluster",
    "start",
    "start_cluster",
    "status",
    "stop_dir",
    "up_cluster",
]

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_NOT_RUNNING = 3  # LSB "program is not running"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_RUN_DIR,
        help="broker data directory (default: .run/kafka)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m deploy.kafka.launcher",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="copy the Kafka jars from Maven Central (if missing)")
    up = sub.add_parser("up", parents=[common], help="start the dev broker (idempotent)")
    up.add_argument("--port", type=int, default=DEFAULT_PORT,
                    help="client port; with --brokers N node i uses PORT+2i and PORT+2i+1")
    up.add_argument("--controller-port", type=int, default=None,
                    help=f"single broker only (default {DEFAULT_CONTROLLER_PORT})")
    up.add_argument("--brokers", type=int, default=1,
                    help="nodes (each broker and controller, its own JVM); 3 for a cluster")
    up.add_argument("--timeout", type=float, default=None,
                    help="readiness budget in seconds (60, a cluster 120)")
    up.add_argument(
        "--foreground", action="store_true", help="stay attached; stop the broker on SIGINT/SIGTERM"
    )
    sub.add_parser("down", parents=[common], help="stop the dev broker")
    sub.add_parser("status", parents=[common],
                   help="exit 0 running, 1 stale (a cluster: some node down), 3 stopped")
    return parser


def _cmd_fetch(_: argparse.Namespace) -> int:
    lib = fetch()
    print(f"Kafka {jar_version(lib)} jars in {lib}")
    return EXIT_OK


def _cmd_up(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    if args.brokers > 1:
        return _cmd_up_cluster(args, data_dir)
    cluster = recorded_cluster(data_dir)
    if cluster is not None and any(node.alive() for node in cluster.nodes):
        print(f"a cluster of {len(cluster.nodes)} nodes runs in {data_dir} on "
              f"{cluster.bootstrap}; `up --brokers {len(cluster.nodes)}` or `down` first",
              file=sys.stderr)
        return EXIT_FAIL
    running = status(data_dir)
    if running is not None:
        print(
            f"Kafka {running.version} already running on {running.bootstrap} "
            f"(pid {running.pid}, dir {data_dir})"
        )
        if args.foreground:
            print(
                "--foreground needs a broker it started itself; run `down` first", file=sys.stderr
            )
            return EXIT_FAIL
        return EXIT_OK
    fetch()
    broker = start(
        data_dir,
        args.port,
        args.controller_port or DEFAULT_CONTROLLER_PORT,
        persistent=True,
        ready_timeout=args.timeout or 60.0,
        quiet=True,
    )
    print(
        f"Kafka {broker.version} ready on {broker.bootstrap} "
        f"(pid {broker.pid}, started in {broker.started_in:.1f} s)",
        flush=True,
    )
    return _foreground(broker) if args.foreground else EXIT_OK


def _cmd_up_cluster(args: argparse.Namespace, data_dir: Path) -> int:
    if args.controller_port is not None:
        print("--controller-port is for one broker; with --brokers N node i's controller "
              "listens on PORT+2i+1", file=sys.stderr)
        return EXIT_FAIL
    if args.foreground:
        print("--foreground is for one broker; stop a cluster with `down`", file=sys.stderr)
        return EXIT_FAIL
    fetch()
    cluster, restarted = up_cluster(data_dir, args.brokers, base_port=args.port,
                                    ready_timeout=args.timeout or 120.0)
    if restarted:
        print(f"started node(s) {', '.join(str(i + 1) for i in restarted)} again")
    print(f"Kafka {cluster.version} cluster of {len(cluster.nodes)} nodes on {cluster.bootstrap} "
          f"(dir {data_dir})", flush=True)
    _print_nodes(cluster)
    return EXIT_OK


def _print_nodes(cluster: Cluster) -> list[str]:
    """One line per node; returns the states."""
    report = cluster.report()
    for _, line in report:
        print(f"  {line}")
    return [state for state, _ in report]


def _foreground(broker: Broker) -> int:
    stop_requested = threading.Event()

    def _handler(signum: int, _frame: object) -> None:
        stop_requested.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)
    while not stop_requested.wait(0.5):
        if not broker.alive():
            print(f"Kafka broker pid {broker.pid} exited; see {broker.log_path}", file=sys.stderr)
            forget(broker.data_dir)
            return EXIT_FAIL
    broker.stop()
    print("Kafka stopped")
    return EXIT_OK


def _cmd_down(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    cluster = recorded_cluster(data_dir)
    if cluster is not None and cluster.stop():
        print(f"Kafka cluster of {len(cluster.nodes)} nodes stopped")
        return EXIT_OK
    print("Kafka stopped" if stop_dir(data_dir) else f"Kafka was not running ({data_dir})")
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    cluster = recorded_cluster(data_dir)
    if cluster is not None and any(node.alive() for node in cluster.nodes):
        print(f"Kafka {cluster.version} cluster of {len(cluster.nodes)} nodes on "
              f"{cluster.bootstrap} (dir {data_dir})")
        states = _print_nodes(cluster)
        return EXIT_OK if all(state == "running" for state in states) else EXIT_FAIL
    running = status(data_dir)
    if running is not None:
        print(
            f"Kafka {running.version} running on {running.bootstrap} "
            f"(pid {running.pid}, dir {data_dir})"
        )
        return EXIT_OK
    found = recorded(data_dir)
    if found is not None and alive(found.pid):
        print(f"Kafka pid {found.pid} is alive but does not answer on {found.bootstrap}")
        return EXIT_FAIL
    print(f"Kafka is not running ({data_dir})")
    return EXIT_NOT_RUNNING


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    commands = {"fetch": _cmd_fetch, "up": _cmd_up, "down": _cmd_down, "status": _cmd_status}
    try:
        return commands[args.command](args)
    except LauncherError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
