"""Fixtures of the cluster suite: local KRaft clusters on free ports, always stopped.

``three_nodes`` starts three combined broker+controller nodes (each its own
JVM, ``launcher.NODE_HEAP``) in a temporary directory and stops every one of
them after the test, whatever it did to them (killed, paused, restarted).
The ``cluster`` marker is registered here so ``-m cluster`` selects the
suite and ``--strict-markers`` accepts it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.kafka import launcher

FETCH_HELP = "the cluster needs the broker jars: python -m deploy.kafka.launcher fetch"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: runs against a local three-node KRaft cluster (make test-cluster)")


@pytest.fixture(autouse=True)
def _quiet_kafka_client_logs() -> None:
    """aiokafka logs every refused connection to a killed node; keep the critical ones."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[launcher.Cluster]:
    """A fresh three-node cluster on free ports, stopped (every node) after the test."""
    try:
        launcher.fetch(quiet=True)
        cluster = launcher.start_cluster(tmp_path / "cluster", 3, ready_timeout=180, quiet=True)
    except launcher.LauncherError as exc:
        pytest.fail(f"{FETCH_HELP}\n{exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
