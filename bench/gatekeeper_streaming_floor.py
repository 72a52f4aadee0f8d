"""The floor under the gatekeeper's CPU while runs stream: its Kafka work per run, no logic.

    python -m bench.gatekeeper_streaming_floor   (``bench.gatekeeper_streaming`` starts it)

A plain aiokafka process that does what the gatekeeper must do in Kafka for
each run and nothing else: one consumer in the gatekeeper's group
(``<prefix>.gatekeeper``, the same client settings) subscribed to
``requests`` and ``runs``, and one transactional producer. Each poll that
returns records is one transaction: for every request, a decision
(``admitted``) and its dispatch on ``dispatch.<agent>``, the request's offset
committed; for every run's end on ``runs``, a thread state (idle, that run
the last) on ``threads`` (partition p of ``runs`` → partition p of
``threads``), the ``runs`` offset committed; a run's start writes nothing
and is committed with the next end of its partition. No validation, no
decisions, no thread memory, no expiry timer, no telemetry.

The records are in the contracts' wire form, built the way
``services.gatekeeper.wire`` builds them (orjson on plain dicts, the field
names of ``contracts``' models): the dispatch is the request's own JSON
object plus ``decidedAt``, the bytes ``contracts.encode(Dispatch)`` gives for
it, which the worker decodes and runs. Encoding through the pydantic models
instead would add ~160 µs per run, which is logic, not Kafka.

Configured from the environment like the gatekeeper (``KAFKA_BOOTSTRAP_SERVERS``,
``AGUI_TOPIC_PREFIX``, ``AGUI_PARTITIONS``, and ``AGUI_GATEKEEPER_BATCH_MS``: its
fetches wait to fill as the gatekeeper's do, so each poll, one transaction, carries
what arrived meanwhile); prints ``ready`` once its
partitions are assigned; stops on SIGTERM. Like the gatekeeper it retries a
transaction begun right after a commit 2 ms later, not 20
(``shorten_commit_gap_backoff``, a client setting).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from contracts import SCHEMA_VERSION, header_value
from contracts.headers import EVENT_TYPE, RUN_ID
from contracts.topics import TERMINAL_TYPES
from services.gatekeeper.settings import GatekeeperSettings
from services.kafka.clients import new_consumer, new_producer
from services.kafka.transactions import shorten_commit_gap_backoff
from services.runtime.lifecycle import run_until_signalled
from services.runtime.settings import KafkaSettings

OPTIONS = orjson.OPT_UTC_Z


def _decision_and_dispatch(
    topics: Any, record: ConsumerRecord[bytes, bytes], now: datetime
) -> list[tuple[str, bytes, bytes | None, int | None]]:
    request = orjson.loads(record.value)
    run = request["input"]
    decision = {"schemaVersion": SCHEMA_VERSION, "requestId": request["requestId"],
                "threadId": run["threadId"], "runId": run["runId"], "agent": request["agent"],
                "verdict": "admitted", "message": "admitted", "decidedAt": now}
    request["decidedAt"] = now
    return [(topics.decisions, orjson.dumps(decision, option=OPTIONS), record.key, None),
            (topics.dispatch(request["agent"]), orjson.dumps(request, option=OPTIONS),
             record.key, None)]


def _thread_state(
    topics: Any, record: ConsumerRecord[bytes, bytes], now: datetime
) -> tuple[str, bytes, bytes | None, int | None]:
    thread_id = record.key.decode() if record.key is not None else ""
    run_id = header_value(record.headers, RUN_ID)
    state = {"schemaVersion": SCHEMA_VERSION, "threadId": thread_id, "status": "idle",
             "runId": run_id, "openInterrupts": [], "queued": [],
             "recentRunIds": [run_id], "recentDecisions": [], "updatedAt": now}
    return topics.threads, orjson.dumps(state, option=OPTIONS), record.key, record.partition


async def floor(settings: KafkaSettings, stop: asyncio.Event) -> None:
    """Consume ``requests`` and ``runs``; one transaction per poll; until ``stop``."""
    shorten_commit_gap_backoff()
    topics = settings.topics
    group = f"{settings.topic_prefix}.gatekeeper"
    batching = GatekeeperSettings()  # AGUI_GATEKEEPER_BATCH_MS: the gatekeeper's fetches
    consumer = new_consumer(settings, "bench-floor", topics.requests, topics.runs,
                            group_id=group, max_poll_records=5000,
                            fetch_min_bytes=batching.fetch_min_bytes,
                            fetch_max_wait_ms=batching.fetch_wait_ms)
    producer = new_producer(settings, "bench-floor", transactional_id=f"{group}.floor")
    await producer.start()
    await consumer.start()
    announced = False
    try:
        while not stop.is_set():
            got = await consumer.getmany(timeout_ms=100, max_records=5000)
            if not announced and consumer.assignment():
                print("ready", flush=True)
                announced = True
            now = datetime.now(UTC)
            out: list[tuple[str, bytes, bytes | None, int | None]] = []
            offsets: dict[TopicPartition, int] = {}
            for tp, records in got.items():
                if tp.topic == topics.requests:
                    for record in records:
                        out += _decision_and_dispatch(topics, record, now)
                    offsets[tp] = records[-1].offset + 1
                    continue
                ends = [_thread_state(topics, r, now) for r in records
                        if header_value(r.headers, EVENT_TYPE) in TERMINAL_TYPES]
                if ends:
                    out += ends
                    offsets[tp] = records[-1].offset + 1
            if not offsets:
                continue
            await producer.begin_transaction()
            for topic, value, key, partition in out:
                await producer.send(topic, value, key=key, partition=partition)
            await producer.send_offsets_to_transaction(offsets, group)
            await producer.commit_transaction()
    finally:
        await consumer.stop()
        await producer.stop()


def main() -> None:
    settings = KafkaSettings()

    async def serve(stop: asyncio.Event) -> None:
        await floor(settings, stop)

    run_until_signalled(serve)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
