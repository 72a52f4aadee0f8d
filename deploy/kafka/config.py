"""A broker's files and ports, and the configs rendered from the templates.

``Layout`` names where a broker keeps everything inside its directory;
``choose_ports`` picks its listener ports (refusing one that is taken);
``render`` writes ``server.properties`` and ``log4j2.properties`` from the
``*.template`` files next to this module (``string.Template``), adding the
SASL and TLS listener sections a test asks for. ``Topology`` says whether the
broker is the single node (replication 1, ``single.properties.template``) or
one node of a local cluster (``cluster.properties.template``): its node id,
the controller quorum, and the replication every node of it applies.
"""

from __future__ import annotations

import base64
import string
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from deploy.kafka.defaults import HOST, KAFKA_DIR
from deploy.kafka.errors import BrokerError
from deploy.kafka.probe import free_port, port_free
from deploy.kafka.tls import TlsConfig

CLUSTER_INTERNAL_PARTITIONS = 3
"""Partitions of ``__consumer_offsets`` and ``__transaction_state`` on a cluster:
their leaders, the group and transaction coordinators, spread over the nodes."""


@dataclass(frozen=True)
class Topology:
    """Which node this broker is, and of which quorum.

    ``voters`` are ``(node_id, controller_port)`` of every node of a cluster,
    this one included; empty means the single node, which votes alone on its
    own controller port. On a cluster every partition gets ``replication``
    copies (3 at most) and a write with acks=all needs ``min_isr`` of them.
    """

    node_id: int = 1
    voters: tuple[tuple[int, int], ...] = ()
    session_timeout_ms: int = 6000

    @property
    def nodes(self) -> int:
        return max(1, len(self.voters))

    @property
    def replication(self) -> int:
        return min(3, self.nodes)

    @property
    def min_isr(self) -> int:
        return max(1, self.replication - 1)

    def quorum_voters(self, controller_port: int) -> str:
        """``controller.quorum.voters``: ``id@host:port`` of every voter."""
        voters = self.voters or ((self.node_id, controller_port),)
        return ",".join(f"{node}@{HOST}:{port}" for node, port in voters)

    def section(self) -> str:
        """The topology's part of ``server.properties``."""
        if not self.voters:
            return template("single.properties.template").substitute()
        return template("cluster.properties.template").substitute(
            node_id=self.node_id, nodes=self.nodes, replication=self.replication,
            min_isr=self.min_isr, internal_partitions=CLUSTER_INTERNAL_PARTITIONS,
            session_timeout_ms=self.session_timeout_ms,
        )


SINGLE = Topology()


@dataclass(frozen=True)
class Layout:
    """Where a broker keeps its files inside ``data_dir``."""

    root: Path

    @property
    def props(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def logs(self) -> Path:
        return self.root / "data"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def server_log(self) -> Path:
        return self.root / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.root / "stdout.log"


def choose_ports(
    port: int | None,
    controller: int | None,
    sasl: int | None,
    ssl: int | None = None,
    sasl_ssl: int | None = None,
) -> dict[str, int]:
    """Listener ports by name; None (or 0 for the optional ones) means "pick a free one"."""
    wanted = {"port": port, "controller_port": controller}
    for name, optional in (("sasl_port", sasl), ("ssl_port", ssl), ("sasl_ssl_port", sasl_ssl)):
        if optional is not None:
            wanted[name] = optional or None
    chosen: dict[str, int] = {}
    for name, value in wanted.items():
        if value is not None and not port_free(value):
            raise BrokerError(f"{HOST}:{value} ({name}) is already in use")
        while value is None or value in chosen.values():
            value = free_port()
        chosen[name] = value
    return chosen


def render(
    layout: Layout,
    ports: Mapping[str, int],
    users: Mapping[str, str],
    tls: TlsConfig | None = None,
    topology: Topology = SINGLE,
) -> None:
    """Write the broker's ``server.properties`` and ``log4j2.properties``."""
    listeners = [f"PLAINTEXT://{HOST}:{ports['port']}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    security_section = ""
    plain = "".join(f' user_{name}="{_jaas_quote(pw)}"' for name, pw in users.items())
    for protocol, key in (("SASL_PLAINTEXT", "sasl_port"), ("SSL", "ssl_port"),
                          ("SASL_SSL", "sasl_ssl_port")):
        if key not in ports:
            continue
        listeners.append(f"{protocol}://{HOST}:{ports[key]}")
        protocols.append(f"{protocol}:{protocol}")
        if protocol.startswith("SASL_"):
            security_section += template("sasl.properties.template").substitute(
                listener=protocol.lower(), plain_users=plain
            )
        if protocol.endswith("SSL") and tls is not None:
            security_section += tls.properties(protocol)
    advertised = ",".join(listeners)
    props = template("server.properties.template").substitute(
        node_id=topology.node_id,
        quorum_voters=topology.quorum_voters(ports["controller_port"]),
        topology_section=topology.section(),
        listeners=",".join([*listeners, f"CONTROLLER://{HOST}:{ports['controller_port']}"]),
        advertised_listeners=advertised,
        protocol_map=",".join(protocols),
        log_dirs=layout.logs,
        sasl_section=security_section,
    )
    layout.props.write_text(props)
    write_log4j(layout)


def write_log4j(layout: Layout) -> None:
    """The broker's logging config: INFO to ``server.log``, Kafka internals at WARN."""
    log4j = template("log4j2.properties.template").substitute(log_path=layout.server_log)
    layout.log4j.write_text(log4j)


def template(name: str) -> string.Template:
    """One of the ``*.template`` files next to this module."""
    return string.Template((KAFKA_DIR / name).read_text())


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def cluster_id() -> str:
    """16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def choose_cluster_ports(nodes: int, base_port: int | None = None) -> list[dict[str, int]]:
    """Client and controller ports of each node of a cluster, all distinct.

    With ``base_port`` node ``i`` (from 0) listens on ``base_port + 2i`` and its
    controller on ``base_port + 2i + 1`` (so node 0 of a cluster on 9092 keeps
    the single broker's 9092/9093); without it every port is a free one.
    """
    chosen: list[dict[str, int]] = []
    taken: set[int] = set()
    for i in range(nodes):
        node: dict[str, int] = {}
        for offset, name in enumerate(("port", "controller_port")):
            if base_port is not None:
                value = base_port + 2 * i + offset
                if not port_free(value):
                    raise BrokerError(f"{HOST}:{value} ({name} of node {i + 1}) is already in use")
            else:
                value = free_port()
                while value in taken:
                    value = free_port()
            taken.add(value)
            node[name] = value
        chosen.append(node)
    return chosen
