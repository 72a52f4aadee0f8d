"""Gatekeeper benchmark: throughput against a no-logic baseline, latency, history cost.

    .venv/bin/python -m bench.gatekeeper [--requests 50000] [--rounds 3]
                                         [--rate 1000] [--seconds 8]

1. **Throughput** (8 partitions, best of ``--rounds`` alternating rounds):
   ``--requests`` RunRequests (one per thread, so each is admitted: a
   decision, a dispatch and a thread state) are written to ``requests``
   first; then the gatekeeper decides them all, timed from its partitions
   being assigned to its last commit. In each round a **baseline**
   (``bench.gatekeeper_baseline``) does the same consume → produce three
   records → ``send_offsets_to_transaction`` → commit loop with the same
   aiokafka client settings and no logic at all, over the same records.
2. **Latency** at a fixed offered load (``--rate`` requests/s for
   ``--seconds``), the gatekeeper and then the baseline each in its own
   process, and a sweep over ``--sweep`` loads (``bench.gatekeeper_latency``).
3. **History**: the pure ``decide()`` on threads with 10 to 10,000 earlier
   runs, flat once a thread's bounded memory fills up
   (``bench.gatekeeper_history``).
4. **Streaming**: the gatekeeper's CPU per token while a worker streams
   runs of 500 ``TEXT_MESSAGE_CONTENT`` events, 20 at a time
   (``bench.gatekeeper_streaming``): it reads run boundaries, not tokens; and
   the same with a plain aiokafka floor doing the same Kafka work in its place.

This module runs the phases (the throughput one itself), reports them and
is the command line, including ``--serve-baseline PREFIX``, the baseline
loop as the latency phase's server process. Starts a local broker through
the launcher when ``KAFKA_BOOTSTRAP_SERVERS`` is unset. Prints a table and
writes ``bench/results/gatekeeper.json``. Benchmarks print; they assert
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import orjson
import uvloop
from rich.console import Console
from rich.table import Table

from bench.broker import broker, topic_prefix
from bench.gatekeeper_baseline import baseline_throughput, serve_baseline
from bench.gatekeeper_history import HISTORIES, history_cost
from bench.gatekeeper_latency import latency, latency_sweep
from bench.gatekeeper_requests import AGENT, PARTITIONS, ROOT, request
from bench.gatekeeper_streaming import compare
from contracts import encode
from services.gatekeeper.processor import Processor
from services.gatekeeper.settings import GatekeeperSettings
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_producer
from services.runtime.settings import KafkaSettings

RESULTS = ROOT / "bench" / "results" / "gatekeeper.json"
console = Console()


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

async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "partitions": PARTITIONS,
        "requests": args.requests,
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
    }
    with broker() as bootstrap:
        prefix = topic_prefix("bench")
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
        results["streaming"] = await compare(settings.with_prefix(prefix + "s"),
                                             args.streaming_runs, 500, 20)
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
    s = r["streaming"]
    table.add_row(
        f"CPU per content event, runs of {s['tokens_per_run']} tokens, {s['lanes']} at a time "
        f"({s['content_events_per_second']:,.0f}/s)",
        f"{s['cpu_us_per_content_event']:.2f} µs", "≤ 1 µs",
    )
    f = s["floor"]
    table.add_row(
        "  floor: plain aiokafka doing the same Kafka work in its place, same load",
        f"{f['cpu_us_per_content_event']:.2f} µs", "",
    )
    table.add_row(
        "  ratio gatekeeper / floor, per content event (busy per run)",
        f"{s['ratio_to_floor']:.2f} ({s['busy_ratio_to_floor']:.2f})", "",
    )
    table.add_row(
        "  per run, gatekeeper / floor (of it idle)",
        f"{s['cpu_us_per_run']:,.0f} ({s['idle_cpu_us_per_run']:,.0f}) / "
        f"{f['cpu_us_per_run']:,.0f} ({f['idle_cpu_us_per_run']:,.0f}) µs", "",
    )
    table.add_row(
        "  of it per run (busy, without idle polling) / with one token per run",
        f"{s['busy_cpu_us_per_run']:,.0f} / {s['one_token']['busy_cpu_us_per_run']:,.0f} µs",
        "",
    )
    table.add_row("  what one more token costs it",
                  f"{s['marginal_cpu_us_per_content_event']:.2f} µs", "0")
    bt = s["batched"]
    table.add_row(
        f"  batching (AGUI_GATEKEEPER_BATCH_MS={bt['batch_ms']}): CPU per content event, "
        "gatekeeper / floor batching alike",
        f"{bt['cpu_us_per_content_event']:.2f} / {bt['floor']['cpu_us_per_content_event']:.2f} µs",
        "≤ 1 µs",
    )
    table.add_row(
        "  request to RUN_STARTED p50, batching / not",
        f"{bt['start_wait_ms']['p50']:.0f} / {s['start_wait_ms']['p50']:.0f} ms", "",
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
    parser.add_argument("--streaming-runs", type=int, default=200)
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
