"""Records retention removed before anyone read them: said, never a silent hole.

Each test runs ``agui-relay up`` (``UpStack``) on the session broker, then removes
records with the admin API's delete-records, as a short ``retention.ms`` does:

- requests published while the gatekeeper was stopped, gone before it came back:
  they can never be decided, but its log names the topic, partition and offsets
  lost, at ERROR (aiokafka had reset the position to the earliest offset, INFO).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka.admin import RecordsToDelete
from faults.load import run_input

from hostile.client import Tenant, finished
from hostile.stack import TENANTS, UpStack
from hostile.topics import envelope, publish, thread_on
from services.kafka.clients import TopicPartition, new_admin
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.hostile

PARTITIONS = 8  # AGUI_PARTITIONS' default, which UpStack leaves as it is


async def delete_records_to(settings: KafkaSettings, topic: str, upto: dict[int, int]) -> None:
    """Remove every record of ``topic`` below ``upto[p]`` on each partition p."""
    admin = new_admin(settings, "hostile-delete-records")
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, p): RecordsToDelete(o)
                                    for p, o in upto.items()}, timeout_ms=10_000)
    finally:
        await admin.close()


def lines_after(path: Path, start: int) -> list[str]:
    return path.read_bytes()[start:].decode("utf-8", "replace").splitlines()


async def test_requests_deleted_under_gatekeeper_are_visible(kafka_bootstrap: str,
                                                             tmp_path: Path) -> None:
    """Requests published while the gatekeeper was down, removed before it came back:
    the restarted gatekeeper's committed offset is below the log start. Its log names
    the topic, partition and the offsets lost, at ERROR."""
    stack = UpStack(kafka_bootstrap, tmp_path)
    settings = stack.settings
    try:
        stack.start()
        tid = f"rh-seed-{uuid.uuid4().hex[:6]}"
        async with Tenant(stack.url, TENANTS["tenant-a"]) as tenant:
            finished(await tenant.run("scripted", run_input(tid, f"{tid}-r1",
                                                            script={"text": "seed"})))
        stack.stop(15.0)
        partition = partition_for(tid, PARTITIONS)
        lost: list[int] = []
        for i in range(2):
            thread = thread_on(partition, PARTITIONS, f"lost{i}")
            doc = envelope(run_input(thread, f"{thread}-r1", script={"text": "x"}))
            lost.append((await publish(settings, settings.topics.requests, thread.encode(),
                                       orjson.dumps(doc)))[1])
        await delete_records_to(settings, settings.topics.requests, {partition: lost[-1] + 1})
        sizes = {name: path.stat().st_size for name, path in stack.log_files().items()}
        stack.start()
        await asyncio.sleep(10.0)
        named = [line[:400] for name, path in stack.log_files().items()
                 for line in lines_after(path, sizes[name])
                 if settings.topics.requests in line and '"error"' in line]
    finally:
        stack.kill()
    assert any(f"partition {partition} " in line and f"..{lost[-1]} " in line
               for line in named), (
        f"requests at {settings.topics.requests} p{partition} offsets {lost} were deleted "
        f"before the gatekeeper read them; logged at ERROR: {named}")
