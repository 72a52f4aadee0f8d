"""The three-broker compose override is valid and makes the cluster the relay's guarantees need.

``deploy/compose.cluster.yaml`` is applied on top of ``deploy/compose.yaml``
(``docker compose -f compose.yaml -f compose.cluster.yaml``). No Docker here,
so the merge Compose does is done by ``merged`` below for the keys these
files use (mappings merged key by key, ``environment`` and ``depends_on``
included; ``ports`` and ``volumes`` appended; anything else replaced), and
the result is checked against the Compose Specification schema, as the
override alone is (and by dclint). Then what the schema cannot see: three
KRaft nodes of one cluster id with the quorum naming all three, replication
factor 3 and ``min.insync.replicas=2`` for every topic (the brokers'
defaults, Kafka's internal topics, and what ``topics create`` picks for 3
brokers), and the services given every broker.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from services.kafka.admin import Replication
from services.runtime.settings import KafkaSettings
from tests.unit.deploy.support import DCLINT, DEPLOY, NPM_HINT, REPO_ROOT, require_file

pytestmark = pytest.mark.unit

NODES = ("kafka", "kafka-2", "kafka-3")
RELAY = ("topics", "gatekeeper", "producer", "consumer")
APPENDED = frozenset({"ports", "volumes"})


def merged(base: Any, override: Any, key: str = "") -> Any:
    """``override`` applied on ``base`` the way Compose merges files (for these keys)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = merged(base[k], v, k) if k in base else v
        return out
    if key in APPENDED and isinstance(base, list) and isinstance(override, list):
        return [*base, *(v for v in override if v not in base)]
    return override


@pytest.fixture(scope="module")
def override() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.cluster.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def cluster(compose: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = merged(compose, override)
    return result


def _env(service: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in service.get("environment", {}).items()}


def test_merge_follows_compose_rules() -> None:
    """The emulated merge: keys merged, ports appended, scalars and commands replaced."""
    base = {"environment": {"A": "1", "B": "2"}, "ports": ["1:1"], "command": ["x", "y"]}
    over = {"environment": {"B": "3"}, "ports": ["2:2"], "command": ["z"]}
    assert merged(base, over) == {"environment": {"A": "1", "B": "3"},
                                  "ports": ["1:1", "2:2"], "command": ["z"]}


@pytest.mark.parametrize("which", ["override", "merged"])
def test_cluster_compose_matches_the_compose_specification(
    override: dict[str, Any], cluster: dict[str, Any], compose_schema: dict[str, Any],
    which: str,
) -> None:
    document = override if which == "override" else cluster
    errors = sorted(Draft7Validator(compose_schema).iter_errors(document), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_dclint_reports_no_errors_in_the_override() -> None:
    script = require_file(DCLINT, NPM_HINT)
    done = subprocess.run(
        ["node", str(script), "--formatter", "json", "--quiet", "deploy/compose.cluster.yaml"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout or "[]")
    assert sum(entry.get("errorCount", 0) for entry in report) == 0, done.stdout


def test_three_kraft_nodes_of_one_cluster(cluster: dict[str, Any]) -> None:
    services = cluster["services"]
    envs = [_env(services[name]) for name in NODES]
    assert {services[name]["image"] for name in NODES} == {services["kafka"]["image"]}
    assert len({e["CLUSTER_ID"] for e in envs}) == 1
    assert [e["KAFKA_NODE_ID"] for e in envs] == ["1", "2", "3"]
    voters = {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs}
    assert voters == {"1@kafka:29093,2@kafka-2:29093,3@kafka-3:29093"}
    for name, env in zip(NODES, envs, strict=True):
        assert services[name]["hostname"] == name
        assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
        assert env["KAFKA_LISTENERS"] == envs[0]["KAFKA_LISTENERS"]
        assert f"INTERNAL://{name}:19092" in env["KAFKA_ADVERTISED_LISTENERS"]
        assert name in services[name]["healthcheck"]["test"][-1]
    mounts = [v for name in NODES for v in services[name]["volumes"]]
    assert len(mounts) == len(set(mounts)) == 3
    published = [p.rsplit(":", 1)[0] for name in NODES for p in services[name]["ports"]]
    assert len(published) == len(set(published)) == 3
    assert set(cluster["volumes"]) >= {m.split(":", 1)[0] for m in mounts}


def test_every_topic_gets_three_replicas_and_min_isr_two(cluster: dict[str, Any]) -> None:
    for name in NODES:
        env = _env(cluster["services"][name])
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2", name
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2", name
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false", name
        assert env["KAFKA_CONTROLLED_SHUTDOWN_ENABLE"] == "true", name
    # What `topics create` gives each catalog topic on these three brokers.
    assert Replication.for_cluster(3) == Replication(3, 2)


def test_the_relay_is_given_every_broker_and_waits_for_all(cluster: dict[str, Any]) -> None:
    services = cluster["services"]
    internal = [f"{name}:19092" for name in NODES]
    for name in RELAY:
        bootstrap = _env(services[name])["KAFKA_BOOTSTRAP_SERVERS"]
        assert bootstrap.split(",") == internal, name
        assert KafkaSettings.model_validate({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    assert services["topics"]["depends_on"] == {
        name: {"condition": "service_healthy"} for name in NODES}
    for name in RELAY[1:]:
        assert services[name]["depends_on"] == {
            "topics": {"condition": "service_completed_successfully"}}
