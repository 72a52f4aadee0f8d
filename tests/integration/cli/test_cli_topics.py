"""``agui-relay topics create|describe`` against the real broker.

The Typer app runs through its test runner (in a worker thread, since the
command runs its own event loop) under a unique topic prefix; what the broker
then reports is read back with ``describe_catalog`` (DescribeConfigs).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner, Result

from services.cli.topics import app
from services.kafka.admin import describe_catalog
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

AGENTS = ("approval", "scripted")
PARTITIONS = 3


async def invoke(env: dict[str, str], *args: str) -> Result:
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, app, list(args), env=env)


def rows(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    out: list[dict[str, Any]] = orjson.loads(result.stdout)
    return out


async def test_topics_create_is_idempotent_and_configures_each_topic(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    env = {"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "AGUI_TOPIC_PREFIX": topic_prefix,
           "AGUI_PARTITIONS": str(PARTITIONS), "AGUI_AGENTS": "approval=a:b,scripted=c:d"}

    before = await invoke(env, "describe", "--json")
    assert before.exit_code == 1, before.output
    assert {r["status"] for r in orjson.loads(before.stdout)} == {"missing"}

    first = rows(await invoke(env, "create", "--json"))
    settings = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
                             AGUI_TOPIC_PREFIX=topic_prefix, AGUI_PARTITIONS=PARTITIONS)
    expected = {s.name for s in settings.topics.specs(AGENTS)}
    assert {r["topic"] for r in first} == expected
    assert {r["status"] for r in first} == {"created"}

    second = await invoke(env, "create")
    assert second.exit_code == 0, second.output
    table = second.stdout
    for name in expected:
        assert name in table
    assert table.count("found") == len(expected)
    assert "created" not in table

    described = rows(await invoke(env, "describe", "--json"))
    assert {r["status"] for r in described} == {"found"}

    states = {s.spec.role + (s.spec.name if s.spec.role == "dispatch" else ""): s
              for s in await describe_catalog(settings, AGENTS)}
    assert states["threads"].configs["cleanup.policy"] == "compact"
    for key, state in states.items():
        assert state.exists, key
        if state.spec.configs["cleanup.policy"] == "delete":
            assert state.configs["cleanup.policy"] == "delete", key
            assert state.configs["retention.ms"] == state.spec.configs["retention.ms"], key
    co = {s.partitions for s in states.values() if s.spec.copartitioned}
    assert co == {PARTITIONS}
    assert {states[r].partitions for r in ("requests", "events", "threads", "control")} == {
        PARTITIONS}
