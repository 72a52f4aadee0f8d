"""The state-store benchmark (issue 16): a million threads, bounded memory, fast restarts.

1. ``BENCH_STATE_THREADS`` (1,000,000) thread states are written straight to
   the compacted ``threads`` topic (8 partitions) in the contract's wire
   form (``services.gatekeeper.wire.state``), one in fifty interrupted, the
   rest idle with a remembered run, through the producer's batch API.
2. A gatekeeper (``python -m services.gatekeeper``, default
   ``AGUI_STATE_CACHE_MB``) owning every partition restores them into its
   stores (a full restore: the first time) and decides a request on an old
   thread; its RSS is read from ``/proc`` then, and again after deciding
   2,000 requests on old threads at 1,000 requests/s (the cache filling).
3. It is SIGKILLed and started again: the time from the start to the
   decision of a request on an old thread (sent at the start), with the
   store, and the same with the store directory deleted first (the full
   replay, into the same bounded store: a million threads in memory would
   take ~4.5 GB here). The gatekeeper has a static identity
   (``AGUI_GATEKEEPER_INSTANCE_ID``, as the StatefulSet gives it), so its
   restart takes the killed process's place in the group at once; a restart
   without one (a dynamic member) is timed too: it waits for the group to
   give up on the killed member (its session: 6 s, the broker's minimum).
   The takeover itself is given from the gatekeeper's own log line.
4. Decision latency at 1,000 requests/s for 10 s (``gatekeeper_latency``)
   with the store and without, same run.
5. One consumer-service instance (``python -m services.consumer``, default
   ``AGUI_STATE_CACHE_MB``, its thread view on disk) reads the million
   threads into its stores; its RSS once ``/readyz`` says the view caught
   up, and again after ``GET /threads/{id}`` of 2,000 old threads (the
   cache filling).

Writes ``bench/results/state_store.json``; nothing asserts.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
from ag_ui.core import Interrupt
from aiokafka.partitioner import DefaultPartitioner
from rich.console import Console
from rich.table import Table

from bench.broker import broker
from bench.gatekeeper_latency import latency
from bench.gatekeeper_requests import AGENT, PARTITIONS, ROOT, request
from contracts import OpenInterrupt, RememberedDecision, ThreadState, encode
from services.gatekeeper import wire
from services.kafka.admin import ensure_topics
from services.kafka.clients import TopicPartition, new_consumer, new_producer
from services.runtime.settings import KafkaSettings

console = Console()
THREADS = int(os.environ.get("BENCH_STATE_THREADS", "1000000"))
RESULTS = ROOT / "bench" / "results"
SESSION_MS = "6000"
INSTANCE = "bench-gatekeeper-0"
DECIDED_AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def state(n: int) -> ThreadState:
    thread_id = f"old-{n}"
    remembered = [RememberedDecision(request_id=f"q-{n}", run_id=f"r{n}", verdict="admitted",
                                     message="admitted", decided_at=DECIDED_AT)]
    if n % 50:
        return ThreadState(thread_id=thread_id, status="idle", agent=AGENT, run_id=f"r{n}",
                           recent_run_ids=[f"r{n}"], recent_decisions=remembered)
    return ThreadState(
        thread_id=thread_id, status="interrupted", agent=AGENT, run_id=f"r{n}",
        interrupted_run_id=f"r{n}", recent_run_ids=[f"r{n}"], recent_decisions=remembered,
        open_interrupts=[OpenInterrupt(run_id=f"r{n}", interrupt=Interrupt(
            id=f"i-{n}", reason="tool_approval", message="Delete 3 files?"))])


async def write_threads(settings: KafkaSettings, n: int) -> float:
    """``n`` thread states onto ``threads``, as fast as the batch API goes; returns seconds."""
    started = time.monotonic()
    producer = new_producer(settings, "bench-state-writer", linger_ms=50,
                            max_batch_size=512 << 10)
    await producer.start()
    every = list(range(PARTITIONS))
    partitioner = DefaultPartitioner()
    idle_template = wire.state(state(1))
    try:
        batches: dict[int, Any] = {}
        futures = []
        for i in range(n):
            key = f"old-{i}".encode()
            value = (wire.state(state(i)) if i % 50 == 0 else
                     idle_template.replace(b"old-1\"", f"old-{i}\"".encode())
                     .replace(b"\"r1\"", f"\"r{i}\"".encode())
                     .replace(b"\"q-1\"", f"\"q-{i}\"".encode()))
            p = partitioner(key, every, every)
            batch = batches.get(p)
            if batch is None:
                batch = batches[p] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                futures.append(await producer.send_batch(batch, settings.topics.threads,
                                                         partition=p))
                batch = batches[p] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
        for p, batch in batches.items():
            futures.append(await producer.send_batch(batch, settings.topics.threads, partition=p))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return time.monotonic() - started


class Gatekeeper:
    """The gatekeeper as a child process, its log kept for the restore line."""

    def __init__(self, settings: KafkaSettings, state_dir: Path | None, log: Path) -> None:
        self.env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
                    "AGUI_TOPIC_PREFIX": settings.topic_prefix,
                    "AGUI_PARTITIONS": str(PARTITIONS), "AGUI_LOG_FORMAT": "json",
                    "AGUI_LOG_LEVEL": "INFO", "AGUI_GATEKEEPER_SESSION_TIMEOUT_MS": SESSION_MS,
                    "AGUI_GATEKEEPER_INSTANCE_ID": INSTANCE}
        if state_dir is not None:
            self.env["AGUI_STATE_DIR"] = str(state_dir)
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None
        self.offset = 0

    async def start(self) -> None:
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "services.gatekeeper", cwd=ROOT, env=self.env,
                stdout=out, stderr=out)

    def rss_mb(self) -> float:
        assert self.proc is not None
        return rss_mb(self.proc.pid)

    def restore_ms(self) -> float | None:
        """The takeover's own figure, from its 'assigned partitions ... in N ms' line."""
        for line in self.log.read_bytes()[self.offset:].splitlines():
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            msg = str(doc.get("msg", ""))
            if msg.startswith("assigned partitions") and msg.endswith(" ms"):
                return float(msg.rsplit(" in ", 1)[1].removesuffix(" ms"))
        return None

    def takeover(self) -> str | None:
        """The takeover's own breakdown (producer, offsets, states, census), as logged."""
        for line in self.log.read_bytes()[self.offset:].splitlines():
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if str(doc.get("msg", "")).startswith("takeover of partitions"):
                return str(doc["msg"]).split(": ", 1)[1]
        return None

    def catch_up(self) -> dict[str, Any]:
        """Records the stores read and how long reading took (their restore log lines)."""
        records, ms = 0, 0.0
        for line in self.log.read_bytes()[self.offset:].splitlines():
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if "records" in doc and "restored:" in str(doc.get("msg", "")):
                records += int(doc["records"])
                ms = max(ms, float(str(doc["msg"]).rsplit(" in ", 1)[1].removesuffix(" ms")))
        return {"records": records, "ms": ms}

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 60)


async def decide_old(settings: KafkaSettings, label: str, threads: list[int],
                     rate: float | None = None, within_s: float = 600) -> float:
    """Send a new run on each of ``threads`` (at ``rate``/s, or at once) and wait for every
    decision; returns seconds from the first send to the last decision."""
    reader = new_consumer(settings, f"bench-state-{label}", group_id=None)
    producer = new_producer(settings, f"bench-state-{label}")
    await reader.start()
    await producer.start()
    try:
        tps = [TopicPartition(settings.topics.decisions, p) for p in range(PARTITIONS)]
        reader.assign(tps)
        await reader.seek_to_end(*tps)
        wanted = {f"{label}-{n}" for n in threads}
        started = time.monotonic()
        for i, n in enumerate(threads):
            r = request(f"old-{n}", f"{label}-{n}")
            r = r.model_copy(update={"request_id": f"{label}-{n}"})
            await producer.send(settings.topics.requests, encode(r), key=f"old-{n}".encode())
            if rate is not None:
                await asyncio.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
        deadline = started + within_s
        while wanted and time.monotonic() < deadline:
            got = await reader.getmany(timeout_ms=100)
            for records in got.values():
                for record in records:
                    wanted.discard(orjson.loads(record.value)["requestId"])
        if wanted:
            raise RuntimeError(f"{len(wanted)} requests not decided within {within_s} s")
        return time.monotonic() - started
    finally:
        await producer.stop()
        await reader.stop()


async def restart(gk: Gatekeeper, settings: KafkaSettings, label: str,
                  meanwhile: Path | None = None) -> dict[str, Any]:
    """SIGKILL (then delete ``meanwhile``), start again, and time a request on an old
    thread from the start."""
    await gk.kill()
    if meanwhile is not None:
        shutil.rmtree(meanwhile)
    started = time.monotonic()
    await gk.start()
    await decide_old(settings, label, [7 * 50], within_s=900)
    return {"to_first_decision_s": time.monotonic() - started,
            "restore_ms": gk.restore_ms(), "store_catch_up": gk.catch_up(),
            "takeover": gk.takeover(),
            "rss_mb": gk.rss_mb()}


def rss_mb(pid: int) -> float:
    """A process's resident set, from ``/proc``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def consumer_rss(settings: KafkaSettings, work: Path) -> dict[str, Any]:
    """One consumer-service instance over the threads written: its RSS once its thread view
    has read them all into its stores, and after 2,000 ``GET /threads/{id}``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
           "AGUI_TOPIC_PREFIX": settings.topic_prefix, "AGUI_PARTITIONS": str(PARTITIONS),
           "AGUI_LOG_FORMAT": "json", "AGUI_HTTP_PORT": str(port),
           "AGUI_STATE_DIR": str(work / "consumer-state"), "AGUI_STARTUP_TIMEOUT_S": "3600"}
    env.pop("AGUI_STATE_CACHE_MB", None)
    started = time.monotonic()
    with (work / "consumer.log").open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.consumer", cwd=ROOT, env=env, stdout=out,
            stderr=out)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            while True:
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.returncode is not None:
                    raise RuntimeError("the consumer service exited; see consumer.log")
                await asyncio.sleep(0.5)
            caught_up_s = time.monotonic() - started
            read = rss_mb(proc.pid)
            found = 0
            for n in range(0, THREADS, max(THREADS // 2000, 1)):
                found += (await http.get(f"/threads/old-{n}")).status_code == 200
            return {"caught_up_s": caught_up_s, "rss_mb": read,
                    "rss_after_2000_lookups_mb": rss_mb(proc.pid), "lookups_found": found}
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def run(bootstrap: str) -> dict[str, Any]:
    base = KafkaSettings(bootstrap_servers=bootstrap, partitions=PARTITIONS)
    settings = base.with_prefix(f"benchstate{int(time.time())}")
    await ensure_topics(settings, (AGENT,))
    result: dict[str, Any] = {"threads": THREADS, "partitions": PARTITIONS}
    result["write_s"] = await write_threads(settings, THREADS)
    console.print(f"[dim]{THREADS:,} thread states written in {result['write_s']:.1f} s[/]")
    work = Path(tempfile.mkdtemp(prefix="agui-bench-state-"))
    state_dir = work / "state"
    gk = Gatekeeper(settings, state_dir, work / "gatekeeper.log")
    try:
        started = time.monotonic()
        await gk.start()
        await decide_old(settings, "first", [50], within_s=1800)
        result["first_start"] = {"to_first_decision_s": time.monotonic() - started,
                                 "restore_ms": gk.restore_ms(), "rss_mb": gk.rss_mb()}
        console.print(f"[dim]first start (full restore into the stores): "
                      f"{result['first_start']}[/]")
        served = await decide_old(settings, "load", list(range(1000, 3000)), rate=1000)
        result["rss_after_2000_decisions_mb"] = gk.rss_mb()
        result["load_2000_s"] = served
        result["store_mb"] = sum(f.stat().st_size for f in state_dir.rglob("*")
                                 if f.is_file()) / 1e6
        result["restart_with_store"] = await restart(gk, settings, "warm")
        console.print(f"[dim]restart with the store: {result['restart_with_store']}[/]")
        result["restart_full_replay"] = await restart(gk, settings, "cold", state_dir)
        console.print(f"[dim]restart, store deleted: {result['restart_full_replay']}[/]")
        del gk.env["AGUI_GATEKEEPER_INSTANCE_ID"]
        result["restart_dynamic"] = await restart(gk, settings, "dynamic")
        console.print(f"[dim]restart with the store, no static identity: "
                      f"{result['restart_dynamic']}[/]")
    finally:
        await gk.stop()
    gatekeeper = [sys.executable, "-m", "services.gatekeeper"]
    points = {}
    for label, extra in (("memory", {}), ("store", {"AGUI_STATE_DIR": str(work / "lat")})):
        scoped = base.with_prefix(f"{settings.topic_prefix}lat{label}")
        await ensure_topics(scoped, (AGENT,))
        points[label] = await latency(scoped, 1000, 10.0, gatekeeper, extra_env=extra)
        console.print(f"[dim]latency at 1,000/s, {label}: p50 {points[label]['p50_ms']:.1f} ms, "
                      f"p99 {points[label]['p99_ms']:.1f} ms[/]")
    result["latency"] = points
    result["latency_ratio_p50"] = points["store"]["p50_ms"] / points["memory"]["p50_ms"]
    result["latency_ratio_p99"] = points["store"]["p99_ms"] / points["memory"]["p99_ms"]
    result["consumer"] = await consumer_rss(settings, work)
    console.print(f"[dim]consumer service: {result['consumer']}[/]")
    shutil.rmtree(work, ignore_errors=True)
    return result


def show(result: dict[str, Any]) -> None:
    table = Table(title=f"state store: {result['threads']:,} threads on the changelog")
    for column in ("measure", "value", "target"):
        table.add_column(column)
    rows = [
        ("gatekeeper RSS after restoring (MB)", f"{result['first_start']['rss_mb']:.0f}",
         "≤ 250"),
        ("gatekeeper RSS after 2,000 decisions on old threads (MB)",
         f"{result['rss_after_2000_decisions_mb']:.0f}", "≤ 250"),
        ("stores on disk (MB)", f"{result['store_mb']:.0f}", ""),
        ("first start, full restore: to first decision (s)",
         f"{result['first_start']['to_first_decision_s']:.1f}", ""),
        ("restart after SIGKILL with the store: to first decision (s)",
         f"{result['restart_with_store']['to_first_decision_s']:.1f}", "≤ 2"),
        ("  changelog records the stores read, and in (ms)",
         f"{result['restart_with_store']['store_catch_up']['records']:,} in "
         f"{result['restart_with_store']['store_catch_up']['ms']:.0f}", ""),
        ("  the takeover's steps", str(result["restart_with_store"]["takeover"]), ""),
        ("  of which the takeover (restore) (ms)", f"{result['restart_with_store']['restore_ms']}",
         ""),
        ("  the same restart without a static identity (waits out the session) (s)",
         f"{result['restart_dynamic']['to_first_decision_s']:.1f}", ""),
        ("restart after SIGKILL, store deleted (full replay): to first decision (s)",
         f"{result['restart_full_replay']['to_first_decision_s']:.1f}", ""),
        ("  of which the takeover (restore) (ms)",
         f"{result['restart_full_replay']['restore_ms']}", ""),
        ("  changelog records the stores read, and in (ms)",
         f"{result['restart_full_replay']['store_catch_up']['records']:,} in "
         f"{result['restart_full_replay']['store_catch_up']['ms']:.0f}", ""),
        ("decision latency p50 at 1,000/s, store / memory (ms)",
         f"{result['latency']['store']['p50_ms']:.1f} / "
         f"{result['latency']['memory']['p50_ms']:.1f}", ""),
        ("decision latency p99 at 1,000/s, store / memory (ms)",
         f"{result['latency']['store']['p99_ms']:.1f} / "
         f"{result['latency']['memory']['p99_ms']:.1f}", ""),
        ("latency ratio store / memory, p50 / p99",
         f"{result['latency_ratio_p50']:.2f} / {result['latency_ratio_p99']:.2f}", "≤ 1.1"),
        ("consumer service RSS, thread view caught up (MB)",
         f"{result['consumer']['rss_mb']:.0f}", "≤ 250"),
        ("consumer service RSS after 2,000 GET /threads/{id} (MB)",
         f"{result['consumer']['rss_after_2000_lookups_mb']:.0f}", "≤ 250"),
        ("  its thread view read the changelog in (s)",
         f"{result['consumer']['caught_up_s']:.1f}", ""),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)


def main() -> int:
    with broker() as bootstrap:
        result = asyncio.run(run(bootstrap))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "state_store.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    show(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
