"""The gatekeeper benchmark's baseline: its Kafka work with no logic at all.

The same consume → produce three records → ``send_offsets_to_transaction``
→ commit loop as the gatekeeper, with the same aiokafka client settings and
no decisions, over the same records: what plain aiokafka transactions cost
on the same machine, for the gatekeeper's throughput and latency to be read
against. It runs in the benchmark's process for the throughput phase and as
a process of its own (``python -m bench.gatekeeper --serve-baseline
PREFIX``) for the latency phase.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bench.gatekeeper_requests import AGENT, PARTITIONS
from services.kafka.clients import new_consumer, new_producer
from services.kafka.transactions import OutRecord, commit_outputs
from services.runtime.lifecycle import run_until_signalled
from services.runtime.settings import KafkaSettings


async def baseline_loop(
    settings: KafkaSettings,
    out: KafkaSettings,
    until: Callable[[int], bool],
    *,
    batched: bool = False,
) -> dict[str, float]:
    """Plain transactional consume → produce 3 records → commit, no logic at all.

    Reads ``settings``' requests, writes each record's value to ``out``'s
    decisions, dispatch and threads topics, one transaction per poll with the
    offsets sent once, until ``until(consumed)`` is true. Timed from the
    first poll that returns records to the last commit. Plain aiokafka writes
    with one ``send`` per record; ``batched`` writes through the gatekeeper's
    own ``commit_outputs`` (aiokafka's batch API) instead, to show how much
    of the ratio is the write path and how much the decisions.
    """
    group = f"{settings.topic_prefix}.baseline{'.batched' if batched else ''}"
    consumer = new_consumer(
        settings, "bench-baseline", settings.topics.requests, group_id=group, max_poll_records=5000
    )
    producer = new_producer(out, "bench-baseline", transactional_id=f"{group}.tx")
    await consumer.start()
    await producer.start()
    topics = (out.topics.decisions, out.topics.dispatch(AGENT), out.topics.threads)
    consumed, first, last, transactions = 0, 0.0, 0.0, 0
    try:
        while not until(consumed):
            got = await consumer.getmany(timeout_ms=100, max_records=5000)
            if not got:
                continue
            first = first or time.perf_counter()
            offsets = {tp: records[-1].offset + 1 for tp, records in got.items()}
            consumed += sum(len(records) for records in got.values())
            if batched:
                outputs = [
                    OutRecord(topic, r.value, r.key)
                    for records in got.values()
                    for r in records
                    for topic in topics
                ]
                await commit_outputs(producer, outputs, offsets, group)
            else:
                await producer.begin_transaction()
                for records in got.values():
                    for r in records:
                        for topic in topics:
                            await producer.send(topic, r.value, key=r.key)
                await producer.send_offsets_to_transaction(offsets, group)
                await producer.commit_transaction()
            transactions += 1
            last = time.perf_counter()
    finally:
        await producer.stop()
        await consumer.stop()
    elapsed = last - first
    return {
        "decisions": consumed,
        "seconds": elapsed,
        "per_second": consumed / elapsed if elapsed else float("nan"),
        "transactions": transactions,
    }


async def baseline_throughput(
    settings: KafkaSettings, out: KafkaSettings, n: int, *, batched: bool = False
) -> dict[str, float]:
    """The baseline over ``n`` preloaded requests, in this process."""
    return await baseline_loop(settings, out, lambda consumed: consumed >= n, batched=batched)


def serve_baseline(prefix: str) -> None:
    """``--serve-baseline PREFIX``: the baseline loop as a process, until SIGTERM."""
    settings = KafkaSettings(topic_prefix=prefix, partitions=PARTITIONS)

    async def main(stop: asyncio.Event) -> None:
        await baseline_loop(settings, settings, lambda _: stop.is_set())

    run_until_signalled(main)
