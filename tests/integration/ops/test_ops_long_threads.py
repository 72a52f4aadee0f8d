"""The operator commands on a thread of hundreds of thousands of events.

On the real stack, after one streaming run of 1,000,000 tiny deltas:
``agui-relay audit THREAD`` held 2.98 GB (maxrss) for 21 s with no output,
and Ctrl-C (SIGINT) sent 4 s in was not acted on: the command went on for
another 46 s (its event loop blocked 27.6 s converting the records), printed
its answer and exited 0; ``agui-relay tail --from-beginning --exit --type
RUN_FINISHED`` printed two lines and reached 319 MB (maxrss) against 96 MB
for a short read: every event it has ever read stays in its de-duplication
set (``services.kafka.records.Deduper``), so a ``tail`` left following a busy
deployment grows without bound (found by probing). ``audit`` now reads a run's
boundaries only, batch by batch, and stops on Ctrl-C with 130; ``Deduper``
keeps one number per run.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import orjson
import pytest
from ops_support import Writer, cli_process

from contracts import EventHeaders
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

EXIT_INTERRUPTED = 130


async def bulk_run(writer: Writer, thread: str, run: str, deltas: int) -> None:
    """One run of ``deltas`` one-character deltas on ``thread``, in record batches."""
    producer = writer.producer
    topic = writer.topics.events
    partition = partition_for(thread, len(await producer.partitions_for(topic)))
    message = f"msg-{run}"
    key = thread.encode()
    values = ([(orjson.dumps({"type": "RUN_STARTED", "threadId": thread, "runId": run}),
                "RUN_STARTED"),
               (orjson.dumps({"type": "TEXT_MESSAGE_START", "messageId": message,
                              "role": "assistant"}), "TEXT_MESSAGE_START")]
              + [(orjson.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": message,
                                "delta": "x"}), "TEXT_MESSAGE_CONTENT")] * deltas
              + [(orjson.dumps({"type": "TEXT_MESSAGE_END", "messageId": message}),
                  "TEXT_MESSAGE_END"),
                 (orjson.dumps({"type": "RUN_FINISHED", "threadId": thread, "runId": run}),
                  "RUN_FINISHED")])
    batch = producer.create_batch()
    for seq, (value, kind) in enumerate(values):
        headers = EventHeaders(run, kind, "scripted", seq).encode()
        while batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
            await (await producer.send_batch(batch, topic, partition=partition))
            batch = producer.create_batch()
    await (await producer.send_batch(batch, topic, partition=partition))


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def peak_rss_of_tail(settings: KafkaSettings, thread: str) -> tuple[int, str]:
    """Peak RSS (KiB) of ``tail --thread T --exit --type RUN_FINISHED`` and its stdout."""
    async with cli_process(settings, "tail", "--thread", thread, "--exit",
                           "--type", "RUN_FINISHED", "--json") as process:
        peak = 0
        waiter = asyncio.ensure_future(process.communicate())
        while not waiter.done():
            peak = max(peak, rss_kib(process.pid))
            await asyncio.sleep(0.05)
        out, _ = await waiter
    return peak, out.decode()


async def test_tail_memory_does_not_grow_with_the_events_it_has_read(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    # two threads on different partitions: each tail reads only its own
    await bulk_run(writer, "short-c", "short-run", 10_000)
    await bulk_run(writer, "long-thread", "long-run", 250_000)
    short_peak, short_out = await peak_rss_of_tail(ops_settings, "short-c")
    long_peak, long_out = await peak_rss_of_tail(ops_settings, "long-thread")
    assert "RUN_FINISHED" in short_out
    assert "RUN_FINISHED" in long_out
    grown_mb = (long_peak - short_peak) / 1024
    assert grown_mb < 25, (
        f"tail printing one line peaked at {long_peak // 1024} MB over 250,000 events "
        f"against {short_peak // 1024} MB over 10,000: it keeps every event it has read")


async def test_audit_stops_on_ctrl_c_while_reading_a_long_thread(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    await bulk_run(writer, "audited", "long-run", 300_000)
    async with cli_process(ops_settings, "audit", "audited") as process:
        assert process.stderr is not None
        said = await asyncio.wait_for(process.stderr.readline(), 60)
        assert said.startswith(b"reading thread audited"), said  # its Ctrl-C is handled now
        assert process.returncode is None, "audit ended before it could be interrupted"
        process.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == EXIT_INTERRUPTED, (
        f"audit ended {process.returncode} after Ctrl-C and printed {out.decode()[:200]!r}")
    assert not out.strip(), "an interrupted audit printed an answer"
    assert "stopped" in err.decode(), err.decode()[-300:]
