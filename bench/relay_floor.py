"""The relay's two Kafka hops with nothing else in them: a floor for the consumer-service overhead.

    .venv/bin/python -m bench.relay_floor [--rate 200] [--seconds 10]

A request goes ``requests`` → a **transactional hop** (what the gatekeeper
must do: a decision, a dispatch and a thread state written with the consumed
offsets in one transaction, through ``commit_outputs``, with the
gatekeeper's shortened commit-gap backoff) → ``dispatch`` → a **worker
hop** (one RUN_STARTED-sized record per dispatch, idempotent, the worker's
linger) → ``events``, where the load generator's own reader sees it. Both
hops are plain aiokafka with no logic at all, each in its own process as
the relay's services are, and there is no HTTP. Send to seen is what any
relay built on these two hops pays at that rate on this machine before
doing any work of its own, so the relay's overhead over a no-Kafka endpoint
(``bench.consumer``) cannot be lower. The CPU each hop, the broker and the
load generator spend per request is reported too: on 2 cores the relay's
latency at 200 runs/s is set by how close its CPU brings the machine to
saturation, and this is the same figure for the floor. Benchmarks print; they assert nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from typing import Any

import orjson
import uvloop

from bench.broker import broker, topic_prefix
from bench.gatekeeper_requests import AGENT, request
from contracts import encode
from services.kafka.admin import ensure_topics
from services.kafka.clients import TopicPartition, new_consumer, new_producer
from services.kafka.transactions import OutRecord, commit_outputs, shorten_commit_gap_backoff
from services.producer.settings import ProducerSettings
from services.runtime.lifecycle import run_until_signalled
from services.runtime.settings import KafkaSettings

PARTITIONS = 8
WARM = 8 * 20
"""Requests sent (and waited for) before measuring: every partition has carried a transaction."""


async def transactional_hop(settings: KafkaSettings, stop: asyncio.Event) -> None:
    """Consume requests; per poll, one transaction of three records per request plus offsets."""
    shorten_commit_gap_backoff()
    group = f"{settings.topic_prefix}.floor-txn"
    consumer = new_consumer(settings, "floor-txn", settings.topics.requests, group_id=group,
                            max_poll_records=5000)
    producer = new_producer(settings, "floor-txn", transactional_id=f"{group}.tx")
    topics = (settings.topics.decisions, settings.topics.dispatch(AGENT), settings.topics.threads)
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            got = await consumer.getmany(timeout_ms=5, max_records=5000)
            if got:
                offsets = {tp: records[-1].offset + 1 for tp, records in got.items()}
                outputs = [OutRecord(topic, r.value, r.key)
                           for records in got.values() for r in records for topic in topics]
                await commit_outputs(producer, outputs, offsets, group)
    finally:
        await producer.stop()
        await consumer.stop()


async def worker_hop(settings: KafkaSettings, stop: asyncio.Event) -> None:
    """Consume dispatches (read_committed); write one RUN_STARTED-sized event for each."""
    consumer = new_consumer(settings, "floor-worker", settings.topics.dispatch(AGENT),
                            group_id=f"{settings.topic_prefix}.floor-worker")
    producer = new_producer(settings, "floor-worker", linger_ms=ProducerSettings().linger_ms)
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=100)).values():
                for record in records:
                    run_input = orjson.loads(record.value)["input"]
                    event = {"type": "RUN_STARTED", "threadId": run_input["threadId"],
                             "runId": run_input["runId"], "timestamp": int(time.time() * 1000)}
                    await producer.send(settings.topics.events, orjson.dumps(event),
                                        key=record.key)
    finally:
        await producer.stop()
        await consumer.stop()


async def floor(bootstrap: str, rate: float, seconds: float) -> dict[str, Any]:
    """p50/p90/p99 from a request's send to its event being read, through both hops, and
    the CPU per request of each hop, the broker (when it listens here) and this process."""
    from bench.consumer import cpu_seconds  # it imports this module
    from bench.consumer_throughput import listening_pid

    broker_pid = listening_pid(int(bootstrap.split(",")[0].rsplit(":", 1)[1]))
    prefix = topic_prefix("floor")
    settings = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix,
                             partitions=PARTITIONS)
    await ensure_topics(settings, (AGENT,))
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "AGUI_LOG_LEVEL": "WARNING"}
    hops = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.relay_floor", "--serve", hop, prefix, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        for hop in ("transactional", "worker")]
    reader = new_consumer(settings, "floor-reader", group_id=None)
    producer = new_producer(settings, "floor-load")
    sent: dict[str, float] = {}
    seen = Arrivals()
    await reader.start()
    await producer.start()
    try:
        events = [TopicPartition(settings.topics.events, p) for p in range(PARTITIONS)]
        reader.assign(events)
        await reader.seek_to_end(*events)
        reading = asyncio.create_task(_read(reader, seen))
        warm = [request(f"floor-warm-{i}", "r0") for i in range(WARM)]
        await _offer(producer, settings, warm, rate, {})
        await seen.wait_for([r.input.thread_id for r in warm], 60)
        load = [request(f"floor-{i}", "r0") for i in range(int(rate * seconds))]
        pids = {"transactional": hops[0].pid, "worker": hops[1].pid}
        if broker_pid is not None:
            pids["broker"] = broker_pid
        before = {n: cpu_seconds(pid) for n, pid in pids.items()}
        client_before = time.process_time()
        await _offer(producer, settings, load, rate, sent)
        await seen.wait_for(list(sent), 30)
        cpu = {n: (cpu_seconds(pid) - before[n]) * 1000 / len(load) for n, pid in pids.items()}
        cpu["load and reader"] = (time.process_time() - client_before) * 1000 / len(load)
        reading.cancel()
    finally:
        await producer.stop()
        await reader.stop()
        for hop in hops:
            with contextlib.suppress(ProcessLookupError):
                hop.terminate()
            await asyncio.wait_for(hop.wait(), 30)
    samples = sorted((seen.at[t] - at) * 1000 for t, at in sent.items() if t in seen.at)
    return {"rate": rate, "requests": len(sent), "seen": len(samples),
            "p50_ms": statistics.median(samples),
            "p90_ms": samples[int(0.9 * (len(samples) - 1))],
            "p99_ms": samples[int(0.99 * (len(samples) - 1))], "max_ms": samples[-1],
            "cpu_ms_per_request": {n: round(v, 2) for n, v in cpu.items()}}


async def _offer(producer: Any, settings: KafkaSettings, requests: list[Any], rate: float,
                 sent: dict[str, float]) -> None:
    """Send ``requests`` at ``rate`` per second (what is due every 2 ms), noting each send."""
    values = [(r.input.thread_id, encode(r)) for r in requests]
    start, done = time.perf_counter(), 0
    while done < len(values):
        due = min(len(values), int((time.perf_counter() - start) * rate) + 1)
        for thread, value in values[done:due]:
            sent[thread] = time.perf_counter()
            await producer.send(settings.topics.requests, value, key=thread.encode())
        done = due
        await asyncio.sleep(max(0.0, start + done / rate - time.perf_counter(), 0.002))


class Arrivals:
    """When each thread's event was read; wakes whoever waits for a set of threads."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self._more = asyncio.Event()

    def note(self, thread: str, now: float) -> None:
        self.at.setdefault(thread, now)
        self._more.set()

    async def wait_for(self, threads: list[str], within_s: float) -> None:
        """Until every one of ``threads`` has been seen, or ``within_s`` passed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                while not all(t in self.at for t in threads):
                    self._more.clear()
                    await self._more.wait()


async def _read(reader: Any, seen: Arrivals) -> None:
    while True:
        got = await reader.getmany(timeout_ms=20)
        now = time.perf_counter()
        for records in got.values():
            for record in records:
                seen.note(record.key.decode(), now)


def serve(hop: str, prefix: str) -> None:
    """``--serve transactional|worker PREFIX``: one hop as a process, until SIGTERM."""
    settings = KafkaSettings(topic_prefix=prefix, partitions=PARTITIONS)
    run = transactional_hop if hop == "transactional" else worker_hop
    run_until_signalled(lambda stop: run(settings, stop))


def cli() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--serve", nargs=2, metavar=("HOP", "PREFIX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    with broker() as bootstrap:
        result = uvloop.run(floor(bootstrap, args.rate, args.seconds))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    cli()
