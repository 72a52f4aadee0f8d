"""A long run written straight onto ``events`` as a worker's producer would write it: the
history and replay tests' thread of hundreds of thousands of events."""

from __future__ import annotations

import orjson
from consumer_harness import Backstage

from contracts import EventHeaders
from services.kafka.partitioning import partition_for

AGENT = "scripted"


async def long_run(backstage: Backstage, thread: str, run: str, deltas: int) -> int:
    """RUN_STARTED, a message of ``deltas`` one-character deltas, RUN_FINISHED, written in
    record batches as a worker's producer would; returns the last sequence number."""
    producer = backstage.producer
    topic = backstage.kafka.topics.events
    partition = partition_for(thread, len(await producer.partitions_for(topic)))
    message = f"msg-{run}"
    events = [{"type": "RUN_STARTED", "threadId": thread, "runId": run},
              {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"}]
    delta = orjson.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": "x"})
    tail = [{"type": "TEXT_MESSAGE_END", "messageId": message},
            {"type": "RUN_FINISHED", "threadId": thread, "runId": run}]
    key = thread.encode()
    batch = producer.create_batch()
    seq = 0

    async def add(value: bytes, kind: str) -> None:
        nonlocal batch, seq
        headers = EventHeaders(run, kind, AGENT, seq).encode()
        while batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
            await (await producer.send_batch(batch, topic, partition=partition))
            batch = producer.create_batch()
        seq += 1

    for event in events:
        await add(orjson.dumps(event), event["type"])
    for _ in range(deltas):
        await add(delta, "TEXT_MESSAGE_CONTENT")
    for event in tail:
        await add(orjson.dumps(event), event["type"])
    await (await producer.send_batch(batch, topic, partition=partition))
    return seq - 1
