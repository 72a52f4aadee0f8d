"""How many replicas agui-relay's topics get on the cluster it finds.

``ensure_topics`` asks the cluster (live brokers in the metadata, and the
brokers' own ``default.replication.factor``) and applies this rule: three
replicas with ``min.insync.replicas=2`` from three brokers up, one otherwise.
A cluster that has lost a broker is still a cluster: its topics must not be
created unreplicated because one node happened to be down.
"""

from __future__ import annotations

import pytest

from services.kafka.admin import Replication

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("brokers", [3, 4, 7])
def test_three_brokers_or_more_get_three_replicas_and_two_in_sync(brokers: int) -> None:
    assert Replication.for_cluster(brokers) == Replication(3, 2)


@pytest.mark.parametrize("brokers", [0, 1, 2])
def test_fewer_brokers_get_one_replica_and_the_broker_default_min_isr(brokers: int) -> None:
    assert Replication.for_cluster(brokers) == Replication(1, None)


def test_a_cluster_with_a_broker_down_still_asks_for_three() -> None:
    assert Replication.for_cluster(2, default_factor=3) == Replication(3, 2)


def test_min_isr_is_added_to_a_topics_configs_and_nothing_else_changes() -> None:
    base = {"cleanup.policy": "compact"}
    assert Replication(3, 2).configs(base) == {"cleanup.policy": "compact",
                                               "min.insync.replicas": "2"}
    assert Replication(1).configs(base) == base
    assert base == {"cleanup.policy": "compact"}
