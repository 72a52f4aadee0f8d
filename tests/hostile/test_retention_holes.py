"""Records retention removed before anyone read them: said, never a silent hole.

Each test runs ``agui-relay up`` (``UpStack``) on the session broker, then removes
records with the admin API's delete-records, as a short ``retention.ms`` does:

- requests published while the gatekeeper was stopped, gone before it came back:
  they can never be decided, but its log names the topic, partition and offsets
  lost, at ERROR (aiokafka had reset the position to the earliest offset, INFO);
- a run's first events gone, then a client continuing it with ``Last-Event-ID``:
  ``410 events_expired`` before any byte, not a 200 stream that skips the lost ids
  (or starts mid-run without ``RUN_STARTED``).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka.admin import RecordsToDelete
from faults.load import run_input

from hostile.client import Tenant, finished, problem_of
from hostile.stack import TENANTS, UpStack
from hostile.topics import envelope, publish, thread_on
from services.kafka.clients import AIOKafkaConsumer, TopicPartition, new_admin
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


async def test_replay_after_retention_cut_the_run_start(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    """A run's first records removed, then a client continues it with ``Last-Event-ID: 2``
    (events 3 and 4 are gone), and another replays it from the start (``RUN_STARTED`` is
    gone): each is told, ``410 events_expired``, not handed a stream with a hole."""
    stack = UpStack(kafka_bootstrap, tmp_path)
    settings = stack.settings
    with stack.running():
        tid = f"rh-gap-{uuid.uuid4().hex[:8]}"
        script = {"text": "abc", "toolCalls": [{"id": "c1", "name": "x"},
                                               {"id": "c2", "name": "y"}]}
        async with Tenant(stack.url, TENANTS["tenant-a"]) as tenant:
            run = await tenant.run("scripted", run_input(tid, f"{tid}-r1", script=script))
            finished(run, "success")
            tp = TopicPartition(settings.topics.events, partition_for(tid, PARTITIONS))
            reader = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap,
                                      isolation_level="read_committed",
                                      enable_auto_commit=False)
            await reader.start()
            try:
                reader.assign([tp])
                await reader.seek_to_beginning(tp)
                end = (await reader.end_offsets([tp]))[tp]
                offsets: list[int] = []
                while await reader.position(tp) < end:
                    for record in (await reader.getmany(tp, timeout_ms=1000)).get(tp, []):
                        if record.key == tid.encode():
                            offsets.append(record.offset)
            finally:
                await reader.stop()
            assert len(offsets) == len(run.events) >= 8, (offsets, len(run.events))
            await delete_records_to(settings, settings.topics.events, {tp.partition: offsets[5]})
            path = f"/threads/{tid}/runs/{tid}-r1/events"
            after_2 = await tenant.get(path, headers={"last-event-id": "2"}, timeout=20.0)
            whole = await tenant.get(path, timeout=20.0)
            still = await tenant.get(path, headers={"last-event-id": "5"}, timeout=20.0)
    for replay in (after_2, whole):
        assert replay.status_code == 410, (replay.status_code, replay.text[:300])
        problem = problem_of(replay)
        assert problem["code"] == "events_expired", problem
        assert f"{tid}-r1" in problem["detail"], problem
    ids = [int(line[3:]) for line in still.text.splitlines() if line.startswith("id:")]
    assert still.status_code == 200, (still.status_code, still.text[:300])
    assert ids[:1] == [6], ids
