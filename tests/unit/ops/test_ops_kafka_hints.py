"""A Kafka error tells the operator what to check by what it says of the cluster.

Every command's Kafka error ended "(is the broker at KAFKA_BOOTSTRAP_SERVERS
running?)". With two of three brokers down, `lag` and `threads` failed with
the node they could not reach while the bootstrap address answered: the hint
sent the operator to the one broker that was running (found by a probe of a
three-broker cluster losing nodes).
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import (
    GroupLoadInProgressError,
    KafkaError,
    NodeNotReadyError,
    NotCoordinatorForGroupError,
    NotEnoughReplicasError,
)

from services.cli.ops.kafka_io import EXIT_ERROR, kafka_hint, run_command


@pytest.mark.parametrize("exc", [
    NodeNotReadyError("Attempt to send a request to node which is not ready (node id 2)."),
    NotEnoughReplicasError(),
])
def test_a_broker_that_did_not_answer_asks_about_every_broker(exc: KafkaError) -> None:
    assert "are all of the cluster's brokers running?" in kafka_hint(exc)


@pytest.mark.parametrize("exc", [NotCoordinatorForGroupError(), GroupLoadInProgressError()])
def test_a_coordinator_moving_says_try_again(exc: KafkaError) -> None:
    assert "coordinator is moving" in kafka_hint(exc)


def test_anything_else_asks_about_the_bootstrap_broker() -> None:
    assert kafka_hint(KafkaError("x")) == "is the broker at KAFKA_BOOTSTRAP_SERVERS running?"


def test_a_command_failing_so_prints_the_hint(capsys: pytest.CaptureFixture[str]) -> None:
    async def body(_stop: asyncio.Event) -> int:
        raise NodeNotReadyError("not ready (node id 2)")

    assert run_command(body) == EXIT_ERROR
    err = " ".join(capsys.readouterr().err.split())
    assert "node id 2" in err
    assert "are all of the cluster's brokers running?" in err
    assert "KAFKA_BOOTSTRAP_SERVERS running" not in err
