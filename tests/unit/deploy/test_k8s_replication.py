"""The Kubernetes manifests state the replication agui-relay's guarantees on a cluster rest on.

The brokers are external to the manifests, so their settings can only be
stated: the ConfigMap's comment names every broker setting a cluster needs
(3 replicas, ``min.insync.replicas=2``, the same for Kafka's internal
topics, no unclean election), and the topics Job's annotations say what
``topics create`` gives each topic and how every producer writes. Both must
agree with the code that decides it (``Replication.for_cluster``, the
producer factory's ``acks``).
"""

from __future__ import annotations

from typing import Any

import pytest

from services.kafka.admin import Replication
from services.kafka.clients import new_producer
from services.runtime.settings import KafkaSettings
from tests.unit.deploy.support import K8S

pytestmark = pytest.mark.unit

BROKER_SETTINGS = (
    "default.replication.factor=3", "min.insync.replicas=2",
    "offsets.topic.replication.factor=3", "transaction.state.log.replication.factor=3",
    "transaction.state.log.min.isr=2", "unclean.leader.election.enable=false",
)


def _job(resources: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [r for r in resources if r["kind"] == "Job"]
    return job


def test_the_config_map_names_the_broker_replication_settings() -> None:
    text = (K8S / "configmap.yaml").read_text()
    missing = [setting for setting in BROKER_SETTINGS if setting not in text]
    assert not missing, f"configmap.yaml does not state {missing}"


async def test_the_topics_job_states_what_topic_creation_picks(
    k8s_resources: list[dict[str, Any]],
) -> None:
    notes = _job(k8s_resources)["metadata"]["annotations"]
    brokers = int(notes["agui-relay.io/replicated-from-brokers"])
    picked = Replication.for_cluster(brokers)
    assert picked == Replication(int(notes["agui-relay.io/replication-factor"]),
                                 int(notes["agui-relay.io/min-insync-replicas"]))
    assert Replication.for_cluster(brokers - 1) == Replication(1)
    assert notes["agui-relay.io/producer-acks"] == "all"
    producer = new_producer(KafkaSettings(), "manifest-check")  # never started: no broker
    try:
        assert producer._sender._acks == -1  # acks=all
    finally:
        await producer.stop()
