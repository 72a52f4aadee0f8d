"""Twenty broker bounces under light load: no transaction is left hanging on a cluster.

On a single broker restarted mid-commit, Kafka 4.4's transaction
coordinator can complete a transaction before the broker's own partitions
have a leader endpoint and skip their markers (``deploy/kafka/README.md``,
``faults.hanging``): ``read_committed`` readers then stop at that
transaction until the same producer writes the partition again. On three
nodes the coordinator and the leaders of a restarting node move to the two
live ones, whose metadata is complete. This scenario bounces the nodes in
turn, twenty times, alternating SIGKILL and a clean stop, while light load
runs, and then requires: no node logged a skipped marker for this
deployment's partitions, nothing is held past a last stable offset (the
``held`` of ``agui-relay lag``), and the checker sees every request decided,
every run ended, nothing doubled (``relay.drill``). Long: only with
``AGUI_CLUSTER_FULL=1`` (``make test-cluster``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from faults.hanging import skipped_partitions

from cluster.relay import LIGHT, Brokers, drill
from deploy.kafka import launcher

pytestmark = [pytest.mark.cluster, pytest.mark.cluster_full]

BOUNCES = 20


def skipped_markers(cluster: launcher.Cluster, prefix: str) -> dict[str, set[int]]:
    """Partitions of ``prefix``'s topics whose markers any node logged as skipped."""
    found: dict[str, set[int]] = {}
    for node in cluster.nodes:
        for topic, numbers in skipped_partitions(node.layout.server_log).items():
            if topic.startswith(f"{prefix}."):
                found.setdefault(topic, set()).update(numbers)
    return found


async def test_twenty_bounces_leave_no_hanging_transaction(
    relay_cluster: launcher.Cluster, tmp_path: Path, summary: Callable[[str], None]
) -> None:
    cluster = relay_cluster

    async def faults(brokers: Brokers) -> None:
        for bounce in range(BOUNCES):
            i = bounce % len(cluster.nodes)
            if bounce % 2:
                await brokers.kill(i, f"bounce {bounce + 1}")
            else:
                await brokers.restart(i, down_s=0.5)

    outcome = await drill(cluster, tmp_path, summary, f"cluster: {BOUNCES} bounces", faults,
                          LIGHT, keep_topics=True)  # deleting them could log skipped markers
    assert len(outcome.brokers.steps) == BOUNCES
    skipped = skipped_markers(cluster, outcome.brokers.stack.prefix)
    summary(f"cluster: {BOUNCES} bounces: transaction markers skipped on this deployment's "
            f"partitions: {sorted((t, sorted(n)) for t, n in skipped.items()) or 'none'}")
    assert not skipped, skipped
