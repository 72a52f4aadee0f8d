"""Fixtures of the cluster suite: local KRaft clusters on free ports, always stopped.

``three_nodes`` starts three combined broker+controller nodes (each its own
JVM, ``launcher.NODE_HEAP``) in a temporary directory and stops every one of
them after the test, whatever it did to them (killed, paused, restarted).
``relay_cluster`` is one such cluster shared by the relay scenarios of a
session (starting one costs half a minute on two cores); after each test
every node is running, resumed and in sync again, whatever the test did.

Markers: ``cluster`` selects the suite (``-m cluster``); ``cluster_full``
marks the long scenarios (three coordinator kills, twenty bounces, longer
load), skipped unless ``AGUI_CLUSTER_FULL=1`` is set or ``-m`` names
``cluster_full``. With the full scenarios on, the shortened ones they
contain (``cluster_short``, one fault of each kind for the default ``make
test``) are skipped instead.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deploy.kafka import launcher

FETCH_HELP = "the cluster needs the broker jars: python -m deploy.kafka.launcher fetch"
FULL_ENV = "AGUI_CLUSTER_FULL"
LINES: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: runs against a local three-node KRaft cluster (make test-cluster)")
    config.addinivalue_line(
        "markers", f"cluster_full: a long cluster scenario, run with {FULL_ENV}=1 or "
                   "-m cluster_full (make test-cluster)")
    config.addinivalue_line(
        "markers", "cluster_short: the shortened version of a cluster_full scenario "
                   "(make test); skipped when the full ones run")


def full_selected(config: pytest.Config) -> bool:
    """True when the long scenarios are asked for (the env var, or ``-m`` naming them)."""
    expression = str(config.option.markexpr)
    named = "cluster_full" in expression and "not cluster_full" not in expression
    return os.environ.get(FULL_ENV, "") == "1" or named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full = full_selected(config)
    for item in items:
        if not full and item.get_closest_marker("cluster_full") is not None:
            item.add_marker(pytest.mark.skip(
                reason=f"long cluster scenario: set {FULL_ENV}=1 (make test-cluster)"))
        if full and item.get_closest_marker("cluster_short") is not None:
            item.add_marker(pytest.mark.skip(reason="the full version of this scenario runs"))


@pytest.fixture(autouse=True)
def _quiet_kafka_client_logs() -> None:
    """aiokafka logs every refused connection to a killed node; keep the critical ones."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def _start(run_dir: Path) -> launcher.Cluster:
    try:
        launcher.fetch(quiet=True)
        return launcher.start_cluster(run_dir, 3, ready_timeout=180, quiet=True)
    except launcher.LauncherError as exc:
        pytest.fail(f"{FETCH_HELP}\n{exc}", pytrace=False)


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[launcher.Cluster]:
    """A fresh three-node cluster on free ports, stopped (every node) after the test."""
    cluster = _start(tmp_path / "cluster")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="package")
def _shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[launcher.Cluster]:
    # Package scope: the three JVMs stop once the cluster tests are done, instead of
    # taking CPU from every later test of a `make test` run.
    cluster = _start(tmp_path_factory.mktemp("relay-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


def restore(cluster: launcher.Cluster) -> None:
    """Every node running (paused ones resumed, stopped ones started) and in sync."""
    for i in range(len(cluster.nodes)):
        if cluster.alive(i):
            cluster.kill_node(i, signal.SIGCONT)
        else:
            cluster.start_node(i, 120)
    cluster.wait_in_sync(180)


@pytest.fixture
def relay_cluster(_shared_cluster: launcher.Cluster) -> Iterator[launcher.Cluster]:
    """The session's shared cluster, every node up and in sync before and after the test."""
    restore(_shared_cluster)
    try:
        yield _shared_cluster
    finally:
        restore(_shared_cluster)


@pytest.fixture
def summary() -> Callable[[str], None]:
    """Record one summary line for the run's terminal summary (and print it)."""

    def add(line: str) -> None:
        LINES.append(line)
        print(line)

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LINES:
        terminalreporter.write_sep("-", "cluster scenarios")
        for line in LINES:
            terminalreporter.write_line(line)
