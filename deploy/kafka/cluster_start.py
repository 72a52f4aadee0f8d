"""Bringing a local cluster up: ports, configs, one cluster id, formats, JVMs, readiness.

The nodes need each other to start (a broker waits for the controller
quorum, which needs a majority of the nodes), so every JVM is launched before
any is awaited. Ready means every node logged ``Kafka Server started`` and
answers, and a node's metadata lists all brokers: only then can a topic with
replication factor 3 be created. Any node exiting during startup, or the
budget running out, stops them all and raises ``BrokerError`` with that
node's log tail.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deploy.kafka import jvm
from deploy.kafka.broker import log_has, log_size, log_tail, make_dirs
from deploy.kafka.cluster import Cluster, Node, recorded_cluster, refuse_if_cluster_running
from deploy.kafka.config import Layout, choose_cluster_ports, cluster_id
from deploy.kafka.defaults import STARTED_MARKER
from deploy.kafka.errors import BrokerError, LauncherError, say
from deploy.kafka.jars import jar_version, require_jars
from deploy.kafka.probe import answers


def start_cluster(
    run_dir: Path,
    brokers: int = 3,
    *,
    base_port: int | None = None,
    persistent: bool = False,
    ready_timeout: float = 120,
    session_timeout_ms: int = 6000,
    lib: Path | None = None,
    quiet: bool = False,
) -> Cluster:
    """Format and launch ``brokers`` combined broker+controller nodes; return when all serve.

    Ports are free ones unless ``base_port`` is given (node ``i`` then uses
    ``base_port + 2i`` and ``base_port + 2i + 1``); a ``persistent`` run dir
    keeps its data, cluster id and recorded ports. ``session_timeout_ms`` is
    how long a silent node stays a member before it is fenced.
    """
    if brokers < 2:
        raise BrokerError("a cluster has at least 2 nodes; one broker is launcher.start")
    t0 = time.monotonic()
    classpath = require_jars(lib)
    root = run_dir.resolve()
    refuse_if_cluster_running(root)
    previous = recorded_cluster(root) if persistent else None
    if previous is not None and len(previous.nodes) != brokers:
        raise BrokerError(f"{root} holds a cluster of {len(previous.nodes)} nodes; start it with "
                          f"that many, or delete the directory for a new one of {brokers}")
    if previous is not None and base_port is None:
        ports = [{"port": n.port, "controller_port": n.controller_port} for n in previous.nodes]
    else:
        ports = choose_cluster_ports(brokers, base_port)
    nodes = [Node(i, p["port"], p["controller_port"], Layout(root / f"node-{i + 1}"))
             for i, p in enumerate(ports)]
    cluster = Cluster(root, _cluster_id(nodes, previous, persistent), nodes,
                      version=jar_version(classpath), classpath=classpath,
                      session_timeout_ms=session_timeout_ms)
    root.mkdir(parents=True, exist_ok=True)
    _format_all(cluster, persistent)
    cluster.record()
    offsets = [log_size(node.layout) for node in nodes]
    try:
        for node in nodes:
            cluster.launch(node)
        _await_all(cluster, offsets, t0 + ready_timeout)
    except LauncherError:
        cluster.stop(timeout=5)
        raise
    cluster.started_in = time.monotonic() - t0
    say(quiet, f"Kafka {cluster.version} cluster of {brokers} ready on {cluster.bootstrap} "
               f"(pids {', '.join(str(n.pid) for n in nodes)}, "
               f"started in {cluster.started_in:.1f} s)")
    return cluster


def _cluster_id(nodes: list[Node], previous: Cluster | None, persistent: bool) -> str:
    """The id the nodes already carry (a persistent run dir), else a new one."""
    if persistent:
        for node in nodes:
            meta = node.layout.logs / "meta.properties"
            if meta.exists():
                for line in meta.read_text().splitlines():
                    if line.startswith("cluster.id="):
                        return line.removeprefix("cluster.id=").strip()
        if previous is not None:
            return previous.cluster_id
    return cluster_id()


def _format_all(cluster: Cluster, persistent: bool) -> None:
    """Render every node's configs and format its storage (in parallel: a JVM each)."""
    java = jvm.java()
    classpath = cluster.classpath
    assert classpath is not None
    for node in cluster.nodes:
        make_dirs(node.layout)
        cluster.render(node)

    def format_one(node: Node) -> None:
        jvm.format_storage(java, classpath, node.layout, {}, cluster=cluster.cluster_id,
                           persistent=persistent, features={})

    with ThreadPoolExecutor(max_workers=len(cluster.nodes)) as pool:
        for done in [pool.submit(format_one, node) for node in cluster.nodes]:
            done.result()


def _await_all(cluster: Cluster, offsets: list[int], deadline: float) -> None:
    """Every node logged its start and answers, then the metadata lists every broker."""
    pending = dict(enumerate(offsets))
    while pending:
        for i, offset in list(pending.items()):
            node = cluster.nodes[i]
            if not node.alive():
                raise BrokerError(f"node {node.node_id} exited during startup:\n"
                                  f"{log_tail(node.layout)}")
            if log_has(node.layout.server_log, offset, STARTED_MARKER) and answers(
                    node.bootstrap, 1.0):
                del pending[i]
        if pending and time.monotonic() > deadline:
            tails = "\n".join(log_tail(cluster.nodes[i].layout) for i in pending)
            raise BrokerError(f"nodes {[i + 1 for i in pending]} did not become ready in "
                              f"time:\n{tails}")
        time.sleep(0.2)
    while len(_brokers_listed(cluster)) < len(cluster.nodes):
        if time.monotonic() > deadline:
            raise BrokerError(f"the cluster's metadata never listed all {len(cluster.nodes)} "
                              f"brokers; see {cluster.run_dir}/node-*/server.log")
        time.sleep(0.2)


def _brokers_listed(cluster: Cluster) -> set[int]:
    try:
        return set(cluster.metadata().brokers)
    except BrokerError:
        return set()


def up_cluster(
    run_dir: Path, brokers: int, *, base_port: int | None = None, ready_timeout: float = 120
) -> tuple[Cluster, list[int]]:
    """``kafka up --brokers N``: the cluster recorded in ``run_dir``, made whole.

    A running cluster of that size is kept and its stopped nodes are started
    again (their indices are returned); otherwise the cluster is started on its
    persistent data (a fresh one the first time).
    """
    found = recorded_cluster(run_dir)
    if found is not None and len(found.nodes) == brokers and any(
            node.alive() for node in found.nodes):
        found.classpath = require_jars(None)
        found.version = jar_version(found.classpath)
        restarted = [node.index for node in found.nodes if not node.alive()]
        for i in restarted:
            found.start_node(i, ready_timeout)
        return found, restarted
    return start_cluster(run_dir, brokers, base_port=base_port, persistent=True,
                         ready_timeout=ready_timeout, quiet=True), []
