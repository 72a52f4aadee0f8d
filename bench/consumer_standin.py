"""A stand-in gatekeeper and producer for the consumer benchmark's isolation phase.

``python -m bench.consumer_standin`` (Kafka settings from the environment)
admits every RunRequest at once and writes the run's events the way a
worker does (RUN_STARTED, one text message, RUN_FINISHED, with their
``EventHeaders``), without transactions or any logic. Behind it, the
consumer service's own share of the POST → RUN_STARTED latency is what is
left: HTTP, validation, publishing, the fan-out and the SSE writer.
``AGUI_BENCH_TOKENS`` (default 1) is how many ``TEXT_MESSAGE_CONTENT`` events
each run streams (``bench.consumer_scaling`` streams runs of 500).

It is a load generator sharing the benchmark's cores with the service it
measures, so it costs as little as it can: each run's events go to the
broker as record batches built here (``create_batch`` / ``send_batch``),
not one ``send`` each (about 20 µs of CPU per event in aiokafka).
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

import orjson
from aiokafka import AIOKafkaProducer

from contracts import Decision, EventHeaders, RunRequest, decode, encode
from services.kafka.clients import new_consumer, new_producer
from services.kafka.partitioning import partition_for
from services.runtime.lifecycle import run_until_signalled
from services.runtime.settings import KafkaSettings


def events(thread: str, run: str, tokens: int = 1) -> list[dict[str, str]]:
    message = f"{run}-m"
    return [{"type": "RUN_STARTED", "threadId": thread, "runId": run},
            {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"},
            *([{"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": "Hello."}]
              * tokens),
            {"type": "TEXT_MESSAGE_END", "messageId": message},
            {"type": "RUN_FINISHED", "threadId": thread, "runId": run}]


async def send_run(producer: AIOKafkaProducer, topic: str, partition: int, thread: str,
                   run: str, agent: str, tokens: int) -> None:
    """Queue one run's events as record batches (as many as its size needs)."""
    key = thread.encode()
    batch = producer.create_batch()
    for seq, event in enumerate(events(thread, run, tokens)):
        value = orjson.dumps(event)
        headers = EventHeaders(run, event["type"], agent, seq).encode()
        while batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
            await producer.send_batch(batch, topic, partition=partition)
            batch = producer.create_batch()
    await producer.send_batch(batch, topic, partition=partition)


async def serve(stop: asyncio.Event) -> None:
    kafka = KafkaSettings()
    tokens = int(os.environ.get("AGUI_BENCH_TOKENS", "1"))
    topics = kafka.topics
    producer = new_producer(kafka, "bench-standin")
    consumer = new_consumer(kafka, "bench-standin", topics.requests,
                            group_id=f"{kafka.topic_prefix}-standin")
    await producer.start()
    await consumer.start()
    partitions = len(await producer.partitions_for(topics.events))
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    request = decode(RunRequest, record.value)
                    thread, run = request.input.thread_id, request.input.run_id
                    decision = Decision(request_id=request.request_id, thread_id=thread,
                                        run_id=run, agent=request.agent, verdict="admitted",
                                        message="admitted", decided_at=datetime.now(UTC))
                    await producer.send(topics.decisions, encode(decision), key=thread.encode())
                    await send_run(producer, topics.events, partition_for(thread, partitions),
                                   thread, run, request.agent, tokens)
            await producer.flush()
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    run_until_signalled(serve)
