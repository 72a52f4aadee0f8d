"""The plain reader on aiokafka's defaults: the second floor of ``bench.consumer_throughput``.

    python -m bench.bare_reader SPEC   (``bench.consumer_throughput`` starts it)

The same reads as that benchmark's own plain reader (every range of SPEC
from its start to its end, once per ``go`` line on stdin, a JSON line of
what it read each time), written the way aiokafka's documentation writes a
consumer: ``asyncio.run`` on the default event loop, CPython's garbage
collector as it comes, an ``AIOKafkaConsumer`` given the bootstrap,
``read_committed`` and the fetch size the service uses. It imports nothing
of agui-relay, so no service's startup objects weigh on its collector.

The other reader runs on the services' runtime (``run_until_signalled``:
uvloop, the startup objects frozen, young collections every
``AGUI_GC_THRESHOLD`` allocations), as the consumer service does; the two
ratios the benchmark prints are the service against a reader given every
advantage it has, and against aiokafka as a team would first write it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

READ_TIMEOUT_S = 60.0
AIOKAFKA_FETCH_WAIT_MS = 500
"""aiokafka's default ``fetch_max_wait_ms``, which the bare reader keeps."""
SETTLE_S = 0.1
"""Beyond a fetch's longest wait, before a read starts its clock (``serve_reads``)."""


Ranges = dict[TopicPartition, int]


def ranges(spec: dict[str, Any]) -> tuple[Ranges, Ranges]:
    """SPEC's start and end offsets, per topic partition."""
    def offsets(key: str) -> Ranges:
        return {TopicPartition(t, int(p)): o for t, v in spec[key].items() for p, o in v.items()}
    return offsets("start"), offsets("end")


async def read(spec: dict[str, Any]) -> None:
    """The bare reader: aiokafka's consumer with what these reads need, on ``serve_reads``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=spec["bootstrap"], client_id="bench-bare-reader",
        isolation_level="read_committed", enable_auto_commit=False,
        max_partition_fetch_bytes=spec["max_partition_fetch_bytes"])
    await serve_reads(consumer, spec, fetch_wait_ms=AIOKAFKA_FETCH_WAIT_MS)


async def serve_reads(consumer: AIOKafkaConsumer, spec: dict[str, Any], *, fetch_wait_ms: int,
                      stop: asyncio.Event | None = None) -> None:
    """Start ``consumer`` and print ``ready``; then for each ``go`` on stdin read every range
    of ``spec`` and print what it read, the seconds from its first fetch to its last record
    and its own CPU time; until stdin ends (or ``stop``). Both readers run this.

    Between reads the partitions are paused. A consumer whose partitions are all
    read to their end keeps a fetch waiting at the broker for ``fetch_wait_ms``
    (``fetch_max_wait_ms``), and sends no other to that broker until it
    returns: timed from the seek, every read but the first would begin with
    up to that long of nothing (half a second, on aiokafka's defaults). So
    each read first waits out any such fetch, paused, and then starts the clock.
    """
    start, end = ranges(spec)
    tps = list(end)
    await consumer.start()
    lines = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
    try:
        consumer.assign(tps)
        consumer.pause(*tps)
        print("ready", flush=True)
        while not (stop and stop.is_set()) and (await lines.readline()).strip() == b"go":
            await asyncio.sleep(fetch_wait_ms / 1000 + SETTLE_S)
            for tp in tps:
                consumer.seek(tp, start[tp])
            consumer.resume(*tps)
            left = {tp for tp in tps if start[tp] < end[tp]}
            counts = dict.fromkeys(spec["end"], 0)
            cpu0, t0 = time.process_time(), time.perf_counter()
            async with asyncio.timeout(READ_TIMEOUT_S):
                while left:
                    batch = await consumer.getmany(timeout_ms=1000, max_records=2000)
                    for tp, records in batch.items():
                        limit = end[tp]
                        counts[tp.topic] += sum(1 for r in records if r.offset < limit)
                        if records[-1].offset + 1 >= limit:
                            left.discard(tp)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            consumer.pause(*tps)
            print(json.dumps({"records": counts, "seconds": seconds, "cpu_s": cpu}), flush=True)
    finally:
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(read(json.loads(sys.argv[1])))
