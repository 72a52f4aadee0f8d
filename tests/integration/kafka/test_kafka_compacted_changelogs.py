"""A changelog topic switched off compaction is refused at start, before a store restores.

``threads`` (the gatekeeper's and the consumer service's thread state) and
``producer-checkpoints`` (the workers') are changelogs: a store restores every live
record from them. An operator who switched ``threads`` to ``delete`` had retention
remove live records, and the gatekeeper and the consumer service then wiped whole
on-disk stores, because their checkpoints were before the log's new start (found
by probing). Each service now checks the policy at start and exits 2 naming it (the consumer
service when it keeps a store on disk, ``AGUI_STATE_DIR``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from faults.topic_configs import alter_topic

from services.cli.settings_errors import USAGE_ERROR
from services.kafka.admin import check_compacted, ensure_topics
from services.runtime.settings import ConfigurationError, KafkaSettings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


async def test_the_catalog_changelogs_pass_and_a_missing_one_is_not_checked(
        kafka: KafkaSettings) -> None:
    await ensure_topics(kafka)
    topics = kafka.topics
    await check_compacted(kafka, (topics.threads, topics.checkpoints, f"{topics.prefix}.none"))


async def test_a_changelog_switched_to_delete_is_refused_naming_it(
        kafka: KafkaSettings) -> None:
    await ensure_topics(kafka)
    await alter_topic(kafka, kafka.topics.threads, {"cleanup.policy": "delete"})
    with pytest.raises(ConfigurationError) as refused:
        await check_compacted(kafka, (kafka.topics.threads, kafka.topics.checkpoints))
    message = str(refused.value)
    assert f"{kafka.topics.threads} (cleanup.policy=delete)" in message
    assert kafka.topics.checkpoints not in message
    assert "cleanup.policy=compact" in message


@pytest.mark.parametrize("service", ["services.gatekeeper", "services.consumer"])
async def test_a_service_exits_2_on_a_threads_topic_not_compacted(
        kafka: KafkaSettings, tmp_path: Path, service: str) -> None:
    await ensure_topics(kafka)
    await alter_topic(kafka, kafka.topics.threads, {"cleanup.policy": "compact,delete"})
    await check_compacted(kafka, (kafka.topics.threads,))  # compacted, with retention too
    await alter_topic(kafka, kafka.topics.threads, {"cleanup.policy": "delete"})
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", service], cwd=REPO,
        capture_output=True, text=True, timeout=120, check=False,
        env={**clean, "COLUMNS": "200", "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
             "AGUI_TOPIC_PREFIX": kafka.topic_prefix, "AGUI_PARTITIONS": "1",
             "AGUI_HTTP_PORT": "0", "AGUI_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == USAGE_ERROR, done.stderr[-2000:]
    assert f"{kafka.topics.threads} (cleanup.policy=delete)" in done.stderr, done.stderr[-2000:]
