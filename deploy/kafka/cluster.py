"""A local KRaft cluster: N nodes, each broker and controller in its own small JVM.

Production runs three brokers or more with replication, so agui-relay's
guarantees are shown on one here too. Every node is a combined
broker+controller (``process.roles=broker,controller``): three JVMs make both
the controller quorum and the replica set, the simplest layout that survives
the loss of any one node, and it fits a 2-core machine (each JVM gets a
512 MiB heap at most). Node ``i`` (from 0) is ``node.id`` ``i + 1`` and lives
in ``<run_dir>/node-<id>`` with its own ports, configs, data and logs; the
cluster is recorded in ``<run_dir>/cluster.json`` and each node, like the
single broker, in its own ``broker.json``.

``Cluster`` is the handle the fault tests drive: stop, kill (any signal,
SIGSTOP included), start a node again, ask who leads a partition, wait until
every partition is fully in sync again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from deploy.kafka import jvm, processes
from deploy.kafka.broker import await_ready, log_size, make_dirs, refuse_if_running, running
from deploy.kafka.config import Layout, Topology, render
from deploy.kafka.defaults import HOST
from deploy.kafka.errors import BrokerError
from deploy.kafka.probe import Metadata, answers, metadata
from deploy.kafka.records import Broker, forget, record, recorded

NODE_HEAP = ("-Xms128m", "-Xmx512m")
"""Each node's heap: three of them plus the services fit a 2-core, 24 GB machine."""
CLUSTER_JSON = "cluster.json"


@dataclass
class Node:
    """One node of a cluster: ``index`` from 0, ``node_id`` = index + 1."""

    index: int
    port: int
    controller_port: int
    layout: Layout
    pid: int | None = None

    @property
    def node_id(self) -> int:
        return self.index + 1

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def alive(self) -> bool:
        """True while this node's JVM exists (also when stopped by SIGSTOP).

        A pid this process did not start is believed only while its command
        line is this node's broker (a recycled pid is not); our own child is
        known by its handle (right after the fork it is not ``java`` yet).
        """
        if self.pid is None or not processes.alive(self.pid):
            return False
        return self.pid in processes.CHILDREN or processes.is_broker_of(self.pid, self.layout.root)

    def broker(self, version: str) -> Broker:
        """The node as a ``Broker`` record (its ``broker.json``)."""
        assert self.pid is not None
        return Broker(bootstrap=self.bootstrap, pid=self.pid, data_dir=self.layout.root,
                      log_path=self.layout.server_log, version=version,
                      ports={"port": self.port, "controller_port": self.controller_port})


@dataclass
class Cluster:
    """A running (or recorded) local cluster; node methods take the index from 0."""

    run_dir: Path
    cluster_id: str
    nodes: list[Node]
    version: str = ""
    classpath: Path | None = None
    session_timeout_ms: int = 6000
    started_in: float = 0.0

    @property
    def bootstrap(self) -> str:
        """Every node's client listener, comma separated (what clients are given)."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def topology(self) -> tuple[tuple[int, int], ...]:
        """``(node_id, controller_port)`` of every node: the controller quorum."""
        return tuple((node.node_id, node.controller_port) for node in self.nodes)

    def index_of(self, node_id: int) -> int:
        """The index of the node Kafka calls ``node_id`` (a coordinator, a leader)."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node.index
        raise BrokerError(f"no node {node_id} in this cluster of {len(self.nodes)}")

    def pid(self, i: int) -> int | None:
        """Node ``i``'s pid, None while it is stopped."""
        return self.nodes[i].pid

    def alive(self, i: int) -> bool:
        """True while node ``i``'s JVM exists (paused or not)."""
        return self.nodes[i].alive()

    def state(self, i: int, timeout: float = 2.0) -> str:
        """``running`` (alive and answering), ``not answering`` (alive, silent) or ``stopped``."""
        node = self.nodes[i]
        if not node.alive():
            return "stopped"
        return "running" if answers(node.bootstrap, timeout) else "not answering"

    def report(self) -> list[tuple[str, str]]:
        """Each node's state and a line saying where it runs (``kafka status``)."""
        out = []
        for i, node in enumerate(self.nodes):
            state = self.state(i)
            pid = "-" if node.pid is None or state == "stopped" else str(node.pid)
            out.append((state, f"node {node.node_id}  {state:<13}  pid {pid:>7}  port {node.port}"
                               f"  controller {node.controller_port}  {node.layout.root}"))
        return out

    def start_node(self, i: int, ready_timeout: float = 60) -> None:
        """Launch node ``i`` again on its data; return when it serves."""
        node = self.nodes[i]
        if node.alive():
            raise BrokerError(f"node {node.node_id} (pid {node.pid}) is already running")
        deadline = time.monotonic() + ready_timeout
        offset = log_size(node.layout)
        self.launch(node)
        self.await_node(node, offset, deadline)

    def stop_node(self, i: int, timeout: float = 30) -> None:
        """Stop node ``i`` cleanly (SIGTERM: controlled shutdown; SIGKILL after ``timeout``)."""
        node = self.nodes[i]
        if node.alive() and node.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGCONT)  # a paused node must run to stop
            processes.terminate(node.pid, timeout)
        self._forget(node)

    def kill_node(self, i: int, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to node ``i``: SIGKILL waits until it is gone, others (SIGSTOP,
        SIGCONT, SIGTERM) are only sent."""
        node = self.nodes[i]
        if not node.alive() or node.pid is None:
            raise BrokerError(f"node {node.node_id} is not running")
        if sig == signal.SIGKILL:
            processes.kill(node.pid)
            self._forget(node)
            return
        os.kill(node.pid, sig)

    def stop(self, timeout: float = 30) -> bool:
        """Stop every node at once (all SIGTERM, then SIGKILL after ``timeout``).

        All together: stopped one after another, the last nodes would wait for
        a controller quorum that is already gone. False if none was running.
        """
        live = [node for node in self.nodes if node.alive()]
        for node in live:
            assert node.pid is not None
            for sig in (signal.SIGTERM, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, sig)
        deadline = time.monotonic() + timeout
        for node in live:
            assert node.pid is not None
            if not processes.wait_exit(node.pid, max(0.0, deadline - time.monotonic())):
                processes.kill(node.pid)
        for node in self.nodes:
            self._forget(node)
        return bool(live)

    def metadata(self, timeout: float = 2.0) -> Metadata:
        """The cluster metadata as the first answering live node reports it."""
        problems = []
        for node in self.nodes:
            if node.alive():
                try:
                    return metadata(HOST, node.port, timeout)
                except (OSError, ValueError) as exc:
                    problems.append(f"node {node.node_id}: {exc}")
        raise BrokerError(f"no node answers a Metadata request ({'; '.join(problems)})")

    def leader(self, topic: str, partition: int) -> int | None:
        """Index of the node leading ``topic``/``partition`` now, None if it has no leader."""
        for info in self.metadata().partitions:
            if info.topic == topic and info.partition == partition and info.leader > 0:
                return info.leader - 1
        return None

    def wait_in_sync(self, timeout: float = 60) -> None:
        """Wait until every partition has a leader and all its replicas in sync."""
        deadline = time.monotonic() + timeout
        lagging: list[str] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(BrokerError):
                meta = self.metadata()
                lagging = [f"{p.topic}-{p.partition} isr {list(p.isr)} of {list(p.replicas)}"
                           for p in meta.under_replicated()]
                if len(meta.brokers) == len(self.nodes) and not lagging:
                    return
            time.sleep(0.2)
        raise BrokerError(f"partitions still under-replicated after {timeout:.0f} s: "
                          f"{', '.join(lagging[:10]) or 'a node is missing from the metadata'}")

    def to_json(self) -> dict[str, object]:
        return {"cluster_id": self.cluster_id, "version": self.version,
                "session_timeout_ms": self.session_timeout_ms,
                "nodes": [{"port": n.port, "controller_port": n.controller_port,
                           "dir": str(n.layout.root)} for n in self.nodes]}

    def record(self) -> None:
        """Write ``cluster.json`` (atomically) into the run directory."""
        tmp = self.run_dir / f"{CLUSTER_JSON}.tmp"
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(self.run_dir / CLUSTER_JSON)

    def render(self, node: Node) -> None:
        """Write node's configs: its ports, the quorum of every node, the cluster's replication."""
        topology = Topology(node_id=node.node_id, voters=self.topology,
                            session_timeout_ms=self.session_timeout_ms)
        ports = {"port": node.port, "controller_port": node.controller_port}
        render(node.layout, ports, {}, topology=topology)

    def launch(self, node: Node) -> None:
        """Start ``node``'s JVM (configs rendered, storage formatted) and record its pid."""
        if self.classpath is None:
            raise BrokerError("this cluster handle has no classpath; start it with start_cluster")
        make_dirs(node.layout)
        node.pid = jvm.launch(jvm.java(), self.classpath, node.layout, NODE_HEAP)
        record(node.broker(self.version))

    def await_node(self, node: Node, log_offset: int, deadline: float) -> None:
        """Wait until ``node`` logged its start after ``log_offset`` and answers."""
        assert node.pid is not None
        try:
            await_ready(node.broker(self.version), node.layout, log_offset, deadline)
        except BrokerError:
            node.pid = None
            raise

    def _forget(self, node: Node) -> None:
        if node.pid is not None:
            processes.CHILDREN.pop(node.pid, None)
        node.pid = None
        forget(node.layout.root)


def recorded_cluster(run_dir: Path) -> Cluster | None:
    """The cluster recorded in ``run_dir``, with the pids of the nodes still running."""
    root = run_dir.resolve()
    try:
        raw = json.loads((root / CLUSTER_JSON).read_text())
        nodes = [Node(i, int(n["port"]), int(n["controller_port"]), Layout(Path(n["dir"])))
                 for i, n in enumerate(raw["nodes"])]
        cluster = Cluster(root, str(raw["cluster_id"]), nodes, version=str(raw.get("version", "")),
                          session_timeout_ms=int(raw.get("session_timeout_ms", 6000)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for node in nodes:
        found = recorded(node.layout.root)
        if found is not None and running(found):
            node.pid = found.pid
    return cluster


def refuse_if_cluster_running(run_dir: Path) -> None:
    """BrokerError when ``run_dir`` holds a running single broker or cluster node."""
    refuse_if_running(run_dir)
    cluster = recorded_cluster(run_dir)
    for node in cluster.nodes if cluster else []:
        if node.alive():
            raise BrokerError(f"node {node.node_id} (pid {node.pid}) already runs in {run_dir}")
