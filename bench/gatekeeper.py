"""Gatekeeper benchmark: throughput against a no-logic baseline, latency, history cost.

    .venv/bin/python -m bench.gatekeeper [--requests 50000] [--rounds 3]
                                         [--rate 1000] [--seconds 8]

1. **Throughput** (8 partitions, best of ``--rounds`` alternating rounds):
   ``--requests`` RunRequests (one per thread, so each is admitted: a
   decision, a dispatch and a thread state) are written to ``requests``
   first; then the gatekeeper decides them all, timed from its partitions
   being assigned to its last commit. In each round a **baseline** does the
   same consume → produce three records → ``send_offsets_to_transaction`` →
   commit loop with the same aiokafka client settings and no logic at all,
   over the same records.
2. **Latency** at a fixed offered load (``--rate`` requests/s for
   ``--seconds``): the gatekeeper runs as its own process (``python -m
   services.gatekeeper``); each request's latency is from just before it is
   sent to its decision arriving at a ``read_committed`` reader. The same
   load is then put through the baseline loop, also in its own process, to
   show what plain aiokafka transactions cost on the same machine.
3. **History**: the pure ``decide()`` on a thread with 10, 100, 1,000 and
   10,000 earlier runs (a full resume of three interrupts): what a thread
   remembers is bounded (16 runs, 32 decisions), so from the point where
   those bounds fill up (about 16 runs) the cost stays flat.

Starts a local broker through the launcher when ``KAFKA_BOOTSTRAP_SERVERS``
is unset. Prints a table and writes ``bench/results/gatekeeper.json``.
Benchmarks print; they assert nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import statistics
import sys
import time
import timeit
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import uvloop
from ag_ui.core import (
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunFinishedInterruptOutcome,
    UserMessage,
)
from aiokafka.partitioner import DefaultPartitioner
from rich.console import Console
from rich.table import Table

from bench.broker import broker
from contracts import RunRequest, ThreadState, encode
from services.gatekeeper.processor import Processor
from services.gatekeeper.rules import Policy, decide, on_boundary
from services.gatekeeper.settings import GatekeeperSettings
from services.gatekeeper.thread import Boundary, fresh
from services.kafka.admin import ensure_topics
from services.kafka.clients import TopicPartition, new_consumer, new_producer
from services.kafka.transactions import OutRecord, commit_outputs
from services.runtime.lifecycle import run_until_signalled
from services.runtime.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "gatekeeper.json"
PARTITIONS = 8
AGENT = "scripted"
console = Console()


def request(thread: str, run: str, resume: list[ResumeEntry] | None = None) -> RunRequest:
    return RunRequest(
        request_id=f"{thread}-{run}",
        agent=AGENT,
        input=RunAgentInput(
            thread_id=thread,
            run_id=run,
            resume=resume,
            messages=[UserMessage(id=f"m-{run}", role="user", content="Delete the old logs.")],
        ),
        submitted_at=datetime.now(UTC),
    )


async def preload(settings: KafkaSettings, n: int) -> float:
    """Write ``n`` requests, one thread each; returns the seconds it took."""
    producer = new_producer(settings, "bench-loader", linger_ms=5, max_batch_size=262_144)
    await producer.start()
    started = time.perf_counter()
    try:
        pending = []
        for i in range(n):
            r = request(f"t{i}", "r0")
            pending.append(
                await producer.send(
                    settings.topics.requests, encode(r), key=r.input.thread_id.encode()
                )
            )
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return time.perf_counter() - started


async def gatekeeper_throughput(settings: KafkaSettings, n: int) -> dict[str, float]:
    """The gatekeeper over ``n`` preloaded requests, in this process.

    Timed from the moment its partitions are assigned and restored (it then
    starts polling) to the commit that brings its decisions to ``n``.
    """
    processor = Processor(settings, GatekeeperSettings(), client_id="bench-gatekeeper")
    stop = asyncio.Event()
    task = asyncio.create_task(processor.run(stop))
    await asyncio.wait(
        [task, asyncio.create_task(processor.assigned.wait())], return_when=asyncio.FIRST_COMPLETED
    )
    started = time.perf_counter()
    while processor.stats["decisions"] < n:
        await asyncio.sleep(0.002)
        if task.done():
            task.result()
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    return {
        "decisions": processor.stats["decisions"],
        "seconds": elapsed,
        "per_second": n / elapsed,
        "transactions": processor.stats["transactions"],
    }


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


async def latency(
    settings: KafkaSettings, rate: int, seconds: float, command: list[str]
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


HISTORIES = (10, 100, 1_000, 10_000)


def history_cost(histories: tuple[int, ...] = HISTORIES) -> dict[str, float]:
    """µs per decide() of a full resume, on threads with different histories.

    The timings are interleaved (every history once per pass, best of the
    passes) so that other work on the machine hits them all alike.
    """
    now = datetime.now(UTC)
    policy = Policy()
    resume = [
        ResumeEntry(interrupt_id=i, status="resolved", payload={"ok": True})
        for i in ("a", "b", "c")
    ]
    probe = request("t", "probe", resume)
    timers: dict[int, timeit.Timer] = {}
    out: dict[str, float] = {}
    for runs in histories:
        state = fresh("t")
        for n in range(runs):
            state = decide(state, request("t", f"r{n}"), now, policy).state
            state, _ = on_boundary(state, Boundary("RUN_FINISHED", f"r{n}", AGENT), now, policy)
        state = _interrupted(state, now, policy)
        assert decide(state, probe, now, policy).decision.verdict == "admitted"
        timers[runs] = timeit.Timer(functools.partial(decide, state, probe, now, policy))
        out[f"{runs}_runs_state_bytes"] = len(encode(state))
    best = dict.fromkeys(histories, float("inf"))
    for _ in range(7):
        for runs, timer in timers.items():
            best[runs] = min(best[runs], timer.timeit(2000) / 2000)
    for runs in histories:
        out[f"{runs}_runs_us"] = best[runs] * 1e6
    return out


def _interrupted(state: ThreadState, now: datetime, policy: Policy) -> ThreadState:
    state = decide(state, request("t", "ask"), now, policy).state
    interrupts = [
        Interrupt(id=i, reason="approve", expires_at="2999-01-01T00:00:00Z")
        for i in ("a", "b", "c")
    ]
    outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
    state, _ = on_boundary(state, Boundary("RUN_FINISHED", "ask", AGENT, outcome), now, policy)
    return state


async def throughput(settings: KafkaSettings, n: int, rounds: int) -> dict[str, Any]:
    """Baseline and gatekeeper over ``n`` preloaded requests, alternating, ``rounds`` times.

    Each round has its own topics. The best round of each is reported (the
    machine is shared: other work only ever slows a round down), with every
    round kept in the JSON.
    """
    runs: dict[str, list[dict[str, float]]] = {
        "baseline": [], "baseline_batched": [], "gatekeeper": []
    }
    for r in range(rounds):
        into = settings.with_prefix(f"{settings.topic_prefix}r{r}")
        out = into.with_prefix(into.topic_prefix + "b")
        out_batched = into.with_prefix(into.topic_prefix + "c")
        for scoped in (into, out, out_batched):
            await ensure_topics(scoped, (AGENT,))
        seconds = await preload(into, n)
        console.print(f"[dim]round {r + 1}: preloaded {n} requests in {seconds:.1f} s[/]")
        runs["baseline"].append(await baseline_throughput(into, out, n))
        runs["baseline_batched"].append(
            await baseline_throughput(into, out_batched, n, batched=True)
        )
        runs["gatekeeper"].append(await gatekeeper_throughput(into, n))
        console.print(
            f"[dim]round {r + 1}: baseline {runs['baseline'][-1]['per_second']:,.0f}/s, "
            f"batched baseline {runs['baseline_batched'][-1]['per_second']:,.0f}/s, "
            f"gatekeeper {runs['gatekeeper'][-1]['per_second']:,.0f}/s[/]"
        )
    best = {k: max(v, key=lambda run: run["per_second"]) for k, v in runs.items()}
    return {
        "baseline": best["baseline"],
        "baseline_batched": best["baseline_batched"],
        "gatekeeper": best["gatekeeper"],
        "ratio": best["gatekeeper"]["per_second"] / best["baseline"]["per_second"],
        "ratio_to_batched": (
            best["gatekeeper"]["per_second"] / best["baseline_batched"]["per_second"]
        ),
        "rounds": runs,
    }


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


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "partitions": PARTITIONS,
        "requests": args.requests,
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
    }
    with broker() as bootstrap:
        prefix = f"bench{uuid.uuid4().hex[:6]}"
        settings = KafkaSettings(
            bootstrap_servers=bootstrap, topic_prefix=prefix, partitions=PARTITIONS
        )
        console.print(f"[dim]broker {bootstrap}, topics {prefix}*[/]")
        results.update(await throughput(settings, args.requests, args.rounds))
        lat = settings.with_prefix(prefix + "l")
        await ensure_topics(lat, (AGENT,))
        gatekeeper = [sys.executable, "-m", "services.gatekeeper"]
        results["latency"] = await latency(lat, args.rate, args.seconds, gatekeeper)
        console.print(f"[dim]gatekeeper latency p99 {results['latency']['p99_ms']:.1f} ms[/]")
        plain = settings.with_prefix(prefix + "p")
        await ensure_topics(plain, (AGENT,))
        baseline = [
            sys.executable,
            "-m",
            "bench.gatekeeper",
            "--serve-baseline",
            plain.topic_prefix,
        ]
        results["baseline_latency"] = await latency(plain, args.rate, args.seconds, baseline)
        results["sweep"] = await latency_sweep(settings, args.sweep, args.sweep_seconds)
    results["history"] = history_cost()
    results["load_average_at_end"] = os.getloadavg()[0]
    return results


def report(r: dict[str, Any]) -> None:
    table = Table(title=f"gatekeeper benchmark ({r['partitions']} partitions)")
    for column in ("measure", "value", "target"):
        table.add_column(column)
    g, b, lat, h = r["gatekeeper"], r["baseline"], r["latency"], r["history"]
    rounds = len(r["rounds"]["gatekeeper"])
    table.add_row(
        f"gatekeeper, decisions/s (end to end, best of {rounds})",
        f"{g['per_second']:,.0f}",
        "≥ 5,000",
    )
    table.add_row(
        f"baseline (no logic), records in/s (best of {rounds})", f"{b['per_second']:,.0f}", ""
    )
    table.add_row("ratio gatekeeper / baseline", f"{r['ratio']:.2f}", "≥ 0.6")
    bb = r["baseline_batched"]
    table.add_row(
        f"baseline written like the gatekeeper (commit_outputs), records in/s (best of {rounds})",
        f"{bb['per_second']:,.0f}",
        "",
    )
    table.add_row("ratio gatekeeper / that baseline", f"{r['ratio_to_batched']:.2f}", "")
    table.add_row(
        "transactions (gatekeeper / baseline)", f"{g['transactions']:,} / {b['transactions']:,}", ""
    )
    table.add_row(f"latency p50 at {lat['offered_per_second']}/s", f"{lat['p50_ms']:.1f} ms", "")
    table.add_row(
        f"latency p99 at {lat['offered_per_second']}/s", f"{lat['p99_ms']:.1f} ms", "≤ 50 ms"
    )
    table.add_row("latency max", f"{lat['max_ms']:.1f} ms", "")
    bl = r["baseline_latency"]
    table.add_row(
        f"baseline (no logic) latency p50 / p99 at {bl['offered_per_second']}/s",
        f"{bl['p50_ms']:.1f} / {bl['p99_ms']:.1f} ms",
        "",
    )
    for runs in HISTORIES:
        table.add_row(
            f"decide(), thread with {runs:,} earlier runs (state bytes)",
            f"{h[f'{runs}_runs_us']:.1f} µs ({h[f'{runs}_runs_state_bytes']:,})",
            "flat" if runs > HISTORIES[0] else "",
        )
    console.print(table)
    console.print(
        f"[dim]{r['cpus']} CPUs, load average {r['load_average_at_start']:.1f} at start, "
        f"{r['load_average_at_end']:.1f} at end (other work on the machine skews latency)[/]"
    )


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sweep", type=lambda v: [int(x) for x in v.split(",") if x],
                        default=[250, 500, 1000, 2000, 4000],
                        help="offered loads (req/s) for the latency-against-load sweep")
    parser.add_argument("--sweep-seconds", type=float, default=4.0)
    parser.add_argument("--serve-baseline", metavar="PREFIX", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_baseline:
        serve_baseline(args.serve_baseline)
        return
    results = uvloop.run(main(args))  # the loop agui-relay gatekeeper runs on, both sides alike
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    report(results)
    console.print(f"[dim]written to {RESULTS.relative_to(ROOT)}[/]")


if __name__ == "__main__":
    cli()
