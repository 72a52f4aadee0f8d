"""The gatekeeper benchmark's latency phase: send to committed decision at a fixed offered load.

The server (the gatekeeper, ``python -m services.gatekeeper``, or the
baseline loop) runs as its own process; requests are offered at ``--rate``
per second for ``--seconds``, and each request's latency is from just before
it is sent to its decision arriving at a ``read_committed`` reader. The same
load is put through the baseline loop to show what plain aiokafka
transactions cost on the same machine, and a sweep over several offered
loads gives the latency-against-load plot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
from typing import Any

import orjson
from aiokafka.partitioner import DefaultPartitioner
from rich.console import Console

from bench.gatekeeper_requests import AGENT, PARTITIONS, ROOT, request
from contracts import RunRequest, encode
from services.kafka.admin import ensure_topics
from services.kafka.clients import TopicPartition, new_consumer, new_producer
from services.runtime.settings import KafkaSettings

console = Console()


async def latency(
    settings: KafkaSettings, rate: int, seconds: float, command: list[str],
    extra_env: dict[str, str] | None = None,
) -> dict[str, float]:
    """p50/p99 from send to a committed decision, the server (``command``) in its own process.

    Measured in steady state: first one probe per partition until the server
    has answered on every partition (its producers started, every partition
    added to a transaction once), then one unmeasured second at the offered
    load, then ``seconds`` measured. Requests are encoded before the clock
    starts, so the load generator spends its time sending, not building them.
    """
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "AGUI_TOPIC_PREFIX": settings.topic_prefix,
        "AGUI_PARTITIONS": str(PARTITIONS),
        "AGUI_LOG_FORMAT": "json",
        "AGUI_LOG_LEVEL": "WARNING",
        **(extra_env or {}),
    }
    child = await asyncio.create_subprocess_exec(
        *command,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    reader = new_consumer(settings, "bench-latency", group_id=None, max_poll_records=5000)
    producer = new_producer(settings, "bench-latency")
    clock = Clock(int(rate * seconds))
    warm_load = _encoded("warmload", rate)
    load = _encoded("lat", clock.total)
    await reader.start()
    await producer.start()
    try:
        tps = [TopicPartition(settings.topics.decisions, p) for p in range(PARTITIONS)]
        reader.assign(tps)
        await reader.seek_to_end(*tps)
        reading = asyncio.create_task(_read_decisions(reader, clock))
        await _warm_up(producer, settings, clock)
        await _offer(producer, settings, warm_load, rate, None)
        await _offer(producer, settings, load, rate, clock)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(clock.all_seen.wait(), 30)
        reading.cancel()
    finally:
        await producer.stop()
        await reader.stop()
        child.terminate()
        await asyncio.wait_for(child.wait(), 30)
    samples = sorted((clock.seen[k] - t) * 1000 for k, t in clock.sent.items() if k in clock.seen)
    return {
        "offered_per_second": rate,
        "requests": len(clock.sent),
        "decided": len(samples),
        "p50_ms": statistics.median(samples),
        "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "max_ms": samples[-1],
    }


def _encoded(label: str, n: int) -> list[tuple[str, bytes, bytes]]:
    """``n`` requests on threads of their own: (requestId, key, value)."""
    out = []
    for i in range(n):
        r = request(f"{label}{i}", "r0")
        out.append((r.request_id, r.input.thread_id.encode(), encode(r)))
    return out


TICK_S = 0.005
"""The load generator sends what is due every 5 ms (5 requests a tick at 1,000/s)."""


async def _offer(
    producer: Any,
    settings: KafkaSettings,
    load: list[tuple[str, bytes, bytes]],
    rate: int,
    clock: Clock | None,
) -> None:
    """Send ``load`` at ``rate`` per second; with a ``clock``, note when each was sent.

    Requests due within a tick go out together, in one produce request: the
    generator shares the machine's two cores with the broker and the server,
    and one produce request per record cost it about 0.5 ms of CPU per
    request, time taken from what is measured. Each latency still starts when
    its request was handed to the producer.
    """
    start = time.perf_counter()
    sent = 0
    while sent < len(load):
        now = time.perf_counter()
        due = min(len(load), int((now - start) * rate) + 1)
        for request_id, key, value in load[sent:due]:
            if clock is not None:
                clock.sent[request_id] = time.perf_counter()
            await producer.send(settings.topics.requests, value, key=key)
        sent = due
        await asyncio.sleep(max(0.0, start + sent / rate - time.perf_counter(), TICK_S))


class Clock:
    """When each request was sent and when its decision was seen."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent: dict[str, float] = {}
        self.seen: dict[str, float] = {}
        self.all_seen = asyncio.Event()
        self.probe = asyncio.Event()


async def _read_decisions(reader: Any, clock: Clock) -> None:
    measured = 0
    while True:
        got = await reader.getmany(timeout_ms=50)
        now = time.perf_counter()
        for records in got.values():
            for record in records:
                request_id = orjson.loads(record.value)["requestId"]
                clock.seen.setdefault(request_id, now)
                if request_id.startswith("probe"):
                    clock.probe.set()
                elif request_id in clock.sent:
                    measured += 1
        if measured >= clock.total:
            clock.all_seen.set()


def _probes() -> list[RunRequest]:
    """One request for each partition (threads whose keys hash there)."""
    by_partition: dict[int, RunRequest] = {}
    every = list(range(PARTITIONS))
    i = 0
    while len(by_partition) < PARTITIONS:
        probe = request(f"probe{i}", "r0")
        by_partition.setdefault(DefaultPartitioner()(f"probe{i}".encode(), every, every), probe)
        i += 1
    return list(by_partition.values())


async def _warm_up(producer: Any, settings: KafkaSettings, clock: Clock) -> None:
    """Until the server has answered a probe on every partition (probes resent each second)."""
    probes = _probes()
    for _ in range(60):
        for probe in probes:
            if probe.request_id not in clock.seen:
                await producer.send_and_wait(
                    settings.topics.requests, encode(probe), key=probe.input.thread_id.encode()
                )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(clock.probe.wait(), 1.0)
        clock.probe.clear()
        if all(p.request_id in clock.seen for p in probes):
            return
        # a probe sent before the server polled is decided once it does; resending
        # an unanswered one under the same requestId only gets the same decision
    raise RuntimeError("the server never answered on every partition")


async def latency_sweep(
    settings: KafkaSettings, rates: list[int], seconds: float
) -> list[dict[str, Any]]:
    """Decision latency at each offered load (for the latency-against-load plot)."""
    gatekeeper = [sys.executable, "-m", "services.gatekeeper"]
    points = []
    for rate in rates:
        scoped = settings.with_prefix(f"{settings.topic_prefix}s{rate}")
        await ensure_topics(scoped, (AGENT,))
        point = await latency(scoped, rate, seconds, gatekeeper)
        console.print(f"[dim]sweep {rate}/s: p50 {point['p50_ms']:.1f} ms, "
                      f"p99 {point['p99_ms']:.1f} ms[/]")
        points.append(point)
    return points
