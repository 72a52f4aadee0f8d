"""The operator CLI's listings on a deployment's volume of threads.

``agui-relay threads`` and ``agui-relay stuck`` read the compacted ``threads``
topic; on a deployment of 250,000 threads (64 partitions, two states per thread
as the gatekeeper writes them: running, then idle or interrupted) the probe
measured ``threads``: 62.8 s and 2.0 GB peak RSS, ``threads --status
interrupted``: 10.4 s and 1.38 GB, ``stuck`` (printing an empty table): 8.1 s
and 1.3 GB, about 8 KB of memory per thread. The commands keep every record
read and every decoded state in memory at once (``TopicReader.read_latest`` then
``records.latest_states``), so their memory grows with the topic's history; a
row of the table is ~0.3 KB (found by probing). Now each record is shaped into
its row as it is read. Here, scaled down: 20,000 threads, two records each,
against the same command on an empty topic.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ag_ui.core import Interrupt
from ops_support import REPO, cli_env

from contracts import OpenInterrupt, RememberedDecision, ThreadState
from services.gatekeeper import wire
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_producer
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 20_000
PARTITIONS = 16
PER_THREAD_BUDGET = 2048
"""Bytes of CLI memory a thread may cost: several times what its table row holds."""
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

WRAPPER = """
import atexit, runpy, sys
OUT = sys.argv[1]
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            open(OUT, 'w').write(line.split()[1])
atexit.register(hwm)
sys.argv = ['agui-relay'] + sys.argv[2:]
runpy.run_module('services.cli.ops', run_name='__main__')
"""


def _states(n: int) -> list[ThreadState]:
    thread_id = f"vol-{n}"
    seen = [RememberedDecision(request_id=f"q-{n}", run_id=f"r{n}", verdict="admitted",
                               message="admitted", decided_at=AT)]
    running = ThreadState(thread_id=thread_id, status="running", agent="scripted",
                          run_id=f"r{n}", recent_run_ids=[f"r{n}"], recent_decisions=seen,
                          run_started_at=AT, updated_at=AT)
    if n % 10:
        end = ThreadState(thread_id=thread_id, status="idle", agent="scripted", run_id=f"r{n}",
                          recent_run_ids=[f"r{n}"], recent_decisions=seen, updated_at=AT)
    else:
        end = ThreadState(
            thread_id=thread_id, status="interrupted", agent="scripted", run_id=f"r{n}",
            interrupted_run_id=f"r{n}", recent_run_ids=[f"r{n}"], recent_decisions=seen,
            open_interrupts=[OpenInterrupt(run_id=f"r{n}", interrupt=Interrupt(
                id=f"i-{n}", reason="tool_approval", message="Delete 3 files?"))],
            updated_at=AT)
    return [running, end]


async def _write_threads(settings: KafkaSettings, n: int) -> None:
    producer = new_producer(settings, "ops-listing-volume", linger_ms=50, max_batch_size=512 << 10)
    await producer.start()
    try:
        batches: dict[int, object] = {}
        sent = []
        for i in range(n):
            key = f"vol-{i}".encode()
            p = partition_for(key.decode(), settings.partitions)
            for state in _states(i):
                value = wire.state(state)
                batch = batches.get(p) or producer.create_batch()
                batches[p] = batch
                if batch.append(key=key, value=value, timestamp=None) is None:  # type: ignore[attr-defined]
                    sent.append(await producer.send_batch(batch, settings.topics.threads,
                                                          partition=p))
                    batch = batches[p] = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=None)
        for p, batch in batches.items():
            sent.append(await producer.send_batch(batch, settings.topics.threads, partition=p))
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _peak_rss_kib(settings: KafkaSettings, tmp: Path, *args: str) -> tuple[int, int, str]:
    out = tmp / f"hwm-{settings.topic_prefix}-{'-'.join(args)}"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRAPPER, str(out), *args, cwd=REPO, env=cli_env(settings),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 600)
    return int(out.read_text()), process.returncode or 0, err.decode()


@pytest.fixture
async def volume(kafka_bootstrap: str, topic_prefix: str) -> tuple[KafkaSettings, KafkaSettings]:
    full = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                         partitions=PARTITIONS)
    empty = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"{topic_prefix}e",
                          partitions=PARTITIONS)
    await ensure_topics(full, ("scripted",))
    await ensure_topics(empty, ("scripted",))
    await _write_threads(full, THREADS)
    return full, empty


@pytest.mark.parametrize("command", [("threads", "--json"), ("threads", "--status", "interrupted"),
                                     ("stuck",)], ids=["threads", "threads-interrupted", "stuck"])
async def test_an_operator_listing_holds_rows_not_the_topics_history(
        volume: tuple[KafkaSettings, KafkaSettings], tmp_path: Path,
        command: tuple[str, ...]) -> None:
    full, empty = volume
    base, code0, _ = await _peak_rss_kib(empty, tmp_path, *command)
    peak, code, err = await _peak_rss_kib(full, tmp_path, *command)
    assert code0 == 0, err[-2000:]
    assert code == 0, err[-2000:]
    grown = (peak - base) * 1024
    assert grown <= PER_THREAD_BUDGET * THREADS, (
        f"`agui-relay {' '.join(command)}` over {THREADS} threads peaked at {peak / 1024:.0f} MB "
        f"RSS against {base / 1024:.0f} MB on an empty topic: {grown / THREADS:.0f} bytes per "
        f"thread (budget {PER_THREAD_BUDGET})")
