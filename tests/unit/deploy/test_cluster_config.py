"""The configs the launcher renders: one broker, and each node of a local cluster.

A cluster node must name itself and every voter of the quorum, listen on its
own ports, keep its data in its own directory and apply the cluster's
replication (3 copies, 2 in sync for a write) to every internal topic, with
controlled shutdown on; the single broker keeps replication 1 and no
controlled shutdown (see single.properties.template for why). A property
written twice would make Kafka take the last one silently, so none may be.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from deploy.kafka import launcher
from deploy.kafka.config import SINGLE, Layout, Topology, choose_cluster_ports, render

pytestmark = pytest.mark.unit

VOTERS = ((1, 20001), (2, 20003), (3, 20005))


def rendered(tmp_path: Path, ports: dict[str, int], topology: Topology) -> dict[str, str]:
    """Render into ``tmp_path`` and parse ``server.properties`` (no key may repeat)."""
    layout = Layout(tmp_path)
    render(layout, ports, {}, topology=topology)
    props: dict[str, str] = {}
    for line in layout.props.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            assert key not in props, f"{key} is set twice"
            props[key] = value
    assert "$" not in "".join(props.values()), "a template placeholder was left unrendered"
    return props


def test_a_cluster_node_names_itself_the_whole_quorum_and_its_own_ports_and_dir(
        tmp_path: Path) -> None:
    props = rendered(tmp_path, {"port": 20002, "controller_port": 20003},
                     Topology(node_id=2, voters=VOTERS))
    assert props["node.id"] == "2"
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:20001,2@127.0.0.1:20003,3@127.0.0.1:20005")
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:20002,CONTROLLER://127.0.0.1:20003"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:20002"
    assert props["log.dirs"] == str(tmp_path / "data")


def test_a_cluster_node_replicates_everything_three_times_with_two_in_sync(
        tmp_path: Path) -> None:
    props = rendered(tmp_path, {"port": 20000, "controller_port": 20001},
                     Topology(node_id=1, voters=VOTERS))
    replicated = {key: props[key] for key in props if key.endswith("replication.factor")}
    assert replicated == dict.fromkeys(
        ("default.replication.factor", "offsets.topic.replication.factor",
         "transaction.state.log.replication.factor",
         "share.coordinator.state.topic.replication.factor"), "3")
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["share.coordinator.state.topic.min.isr"] == "2"
    assert props["controlled.shutdown.enable"] == "true"
    assert props["unclean.leader.election.enable"] == "false"
    assert props["broker.session.timeout.ms"] == "6000"


def test_the_session_timeout_is_the_clusters_to_choose(tmp_path: Path) -> None:
    props = rendered(tmp_path, {"port": 20000, "controller_port": 20001},
                     Topology(node_id=1, voters=VOTERS, session_timeout_ms=9000))
    assert props["broker.session.timeout.ms"] == "9000"


def test_two_nodes_replicate_twice_and_need_one_in_sync(tmp_path: Path) -> None:
    props = rendered(tmp_path, {"port": 20000, "controller_port": 20001},
                     Topology(node_id=1, voters=VOTERS[:2]))
    assert props["default.replication.factor"] == "2"
    assert props["min.insync.replicas"] == "1"


def test_the_single_broker_keeps_replication_one_and_no_controlled_shutdown(
        tmp_path: Path) -> None:
    props = rendered(tmp_path, {"port": 20000, "controller_port": 20001}, SINGLE)
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:20001"
    assert props["default.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["offsets.topic.num.partitions"] == "1"
    assert props["controlled.shutdown.enable"] == "false"
    assert props["broker.session.timeout.ms"] == "4000"


def test_cluster_ports_from_a_base_follow_the_documented_pattern() -> None:
    base = _free_block(6)
    assert choose_cluster_ports(3, base) == [
        {"port": base, "controller_port": base + 1},
        {"port": base + 2, "controller_port": base + 3},
        {"port": base + 4, "controller_port": base + 5},
    ]


def test_free_cluster_ports_are_all_distinct() -> None:
    ports = [p for node in choose_cluster_ports(3) for p in node.values()]
    assert len(set(ports)) == 6


def test_a_taken_port_in_the_cluster_block_is_refused() -> None:
    base = _free_block(6)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind((launcher.HOST, base + 3))
        listener.listen()
        with pytest.raises(launcher.BrokerError, match="controller_port of node 2"):
            choose_cluster_ports(3, base)


def test_a_cluster_needs_two_nodes_at_least(tmp_path: Path) -> None:
    with pytest.raises(launcher.BrokerError, match="at least 2"):
        launcher.start_cluster(tmp_path, 1)


def _free_block(n: int) -> int:
    """A base port below the ephemeral range whose next ``n`` ports are free now."""
    for base in range(21000, 32000, 10):
        if all(_bindable(base + i) for i in range(n)):
            return base
    pytest.fail("no block of free ports below 32000")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((launcher.HOST, port))
        except OSError:
            return False
        return True


def test_kafkas_node_ids_map_to_the_nodes_indices(tmp_path: Path) -> None:
    nodes = [launcher.Node(i, 20000 + 2 * i, 20001 + 2 * i, Layout(tmp_path / f"node-{i + 1}"))
             for i in range(3)]
    cluster = launcher.Cluster(tmp_path, "cid", nodes)
    assert [cluster.index_of(node_id) for node_id in (1, 2, 3)] == [0, 1, 2]
    assert cluster.topology == VOTERS
    assert cluster.bootstrap == "127.0.0.1:20000,127.0.0.1:20002,127.0.0.1:20004"
    with pytest.raises(launcher.BrokerError, match="no node 4"):
        cluster.index_of(4)
