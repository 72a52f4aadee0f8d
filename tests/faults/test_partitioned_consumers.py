"""Three consumer instances, the real gatekeeper and worker: each event read by one instance.

Runs on threads covering every partition, each posted to a random one of
three consumer-service instances (issue 15, items 2 and 3): every run
streams whole and in order through whichever instance it was posted to, and
the events those runs wrote were read by exactly one instance — the sum over
the instances of ``agui_consumer_records_routed_total{role="events"}`` grew
by exactly the number of event records the topic gained, and each instance
read some. The fault suite's checker finds every run decided and ended once.
"""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from faults.harness import Stack, StackConfig, unique_prefix
from faults.scenario import verify
from services.kafka.clients import TopicPartition, new_consumer
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.faults

RUNS_PER_PARTITION = 3
ROUTED = re.compile(rb'^agui_consumer_records_routed_total\{role="events"\} (\S+)$', re.M)


async def routed(http: httpx.AsyncClient, url: str) -> int:
    found = ROUTED.search((await http.get(f"{url}/metrics")).content)
    return int(float(found.group(1))) if found else 0


async def event_records(kafka: KafkaSettings) -> int:
    """The committed records on the events topic (transaction markers not counted)."""
    consumer = new_consumer(kafka, "test-count-events", group_id=None)
    await consumer.start()
    try:
        parts = [TopicPartition(kafka.topics.events, p) for p in range(kafka.partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        count = 0
        async with asyncio.timeout(60):
            while [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
                batch = await consumer.getmany(timeout_ms=500)
                count += sum(len(records) for records in batch.values())
        return count
    finally:
        await consumer.stop()


async def test_every_event_is_read_by_exactly_one_of_three_instances(
        kafka_bootstrap: str, tmp_path: Path, summary: Callable[[str], None]) -> None:
    config = StackConfig(gatekeepers=1, producers=1, consumers=3)
    rng = random.Random(15)
    async with Stack(kafka_bootstrap, unique_prefix("pc"), tmp_path, config) as stack:
        urls = stack.consumer_urls
        threads: list[str] = []
        per: dict[int, int] = {}
        while min(per.get(p, 0) for p in range(config.partitions)) < RUNS_PER_PARTITION:
            thread = f"pc-{uuid.uuid4().hex[:10]}"
            p = partition_for(thread, config.partitions)
            if per.get(p, 0) < RUNS_PER_PARTITION:
                per[p] = per.get(p, 0) + 1
                threads.append(thread)
        async with httpx.AsyncClient(timeout=60.0) as http:
            await asyncio.sleep(2.0)  # the startup rewinds read, the group settled
            before = [await routed(http, u) for u in urls]
            records_before = await event_records(stack.settings)

            async def run(thread: str) -> list[dict[str, object]]:
                body = {"threadId": thread, "runId": f"{thread}-1",
                        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
                        "forwardedProps": {"script": {"text": "a few words", "repeat": 3}}}
                answer = await http.post(f"{rng.choice(urls)}/agents/scripted", json=body)
                assert answer.status_code == 200, answer.text
                return [orjson.loads(line[6:]) for line in answer.text.split("\n")
                        if line.startswith("data: ")]

            streams = await asyncio.gather(*(run(t) for t in threads))
            records_after = await event_records(stack.settings)
            async with asyncio.timeout(30):
                while True:
                    after = [await routed(http, u) for u in urls]
                    if sum(after) - sum(before) >= records_after - records_before:
                        break
                    await asyncio.sleep(0.2)
        for events in streams:
            assert events[0]["type"] == "RUN_STARTED"
            assert events[-1]["type"] == "RUN_FINISHED"
            assert [e["type"] for e in events[1:-1]] == [
                "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]
        read = [a - b for a, b in zip(after, before, strict=True)]
        written = records_after - records_before
        assert sum(read) == written, (read, written)
        assert all(n > 0 for n in read), read
        await verify(stack, summary, "three partitioned consumer instances",
                     f"{len(threads)} runs on {config.partitions} partitions, {written} event "
                     f"records read {read} by the three instances (each once)")
