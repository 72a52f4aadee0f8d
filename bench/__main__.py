"""``make bench``: every benchmark in one run, one summary, one plot.

Starts one local broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` is set) and runs
the gatekeeper, producer and consumer benchmarks against it, each in its own
process so none inherits another's event loop, garbage or imports. Each
writes its own ``bench/results/<name>.json`` and prints its own table; this
module then prints the headline figures against their targets, writes
``bench/results/summary.json`` and plots decision latency against offered
load to ``bench/decision-latency.png`` (kept in git: the README shows it). Nothing here asserts: the
figures are measured, printed and kept.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from bench.broker import broker

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BENCHES = ("gatekeeper", "producer", "consumer", "consumer_scaling", "consumer_throughput",
           "upstream", "inbox", "state_store")
PLOT = ROOT / "bench" / "decision-latency.png"
console = Console()


def run_bench(name: str, bootstrap: str) -> dict[str, Any] | None:
    """Run ``python -m bench.<name>``; its results, or None when it failed."""
    console.rule(f"[bold]{name}")
    started = time.monotonic()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    code = subprocess.call([sys.executable, "-m", f"bench.{name}"], env=env, cwd=ROOT)
    console.print(f"[dim]{name}: {time.monotonic() - started:.0f} s, exit {code}[/]")
    path = RESULTS / f"{name}.json"
    if code != 0 or not path.exists() or path.stat().st_mtime < time.time() - (
            time.monotonic() - started):
        return None
    result: dict[str, Any] = orjson.loads(path.read_bytes())
    return result


def _swept(doc: dict[str, Any] | None, rate: float, *path: str) -> Any:
    """A figure of ``bench.consumer``'s sweep at ``rate``."""
    for point in _get(doc, "sweep") or ():
        if point.get("rate") == rate:
            return _get(point, *path)
    return None


def _get(doc: dict[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


Headline = tuple[str, str, Callable[[dict[str, dict[str, Any] | None]], Any], str, str]

HEADLINES: tuple[Headline, ...] = (
    ("gatekeeper", "decisions/s end to end (8 partitions, 50,000 requests)",
     lambda r: _get(r["gatekeeper"], "gatekeeper", "per_second"), "{:,.0f}", "≥ 5,000"),
    ("gatekeeper", "ratio to plain aiokafka transactional loop",
     lambda r: _get(r["gatekeeper"], "ratio"), "{:.2f}", "≥ 0.6"),
    ("gatekeeper", "ratio to that loop written like the gatekeeper (batch API)",
     lambda r: _get(r["gatekeeper"], "ratio_to_batched"), "{:.2f}", ""),
    ("gatekeeper", "decision latency p50 at 1,000 req/s (ms)",
     lambda r: _get(r["gatekeeper"], "latency", "p50_ms"), "{:.1f}", ""),
    ("gatekeeper", "decision latency p99 at 1,000 req/s (ms)",
     lambda r: _get(r["gatekeeper"], "latency", "p99_ms"), "{:.1f}", "≤ 50"),
    ("gatekeeper", "decide() µs at 10 / 10,000 earlier runs",
     lambda r: (_get(r["gatekeeper"], "history", "10_runs_us"),
                _get(r["gatekeeper"], "history", "10000_runs_us")), "{:.1f} / {:.1f}", "flat"),
    ("gatekeeper", "CPU per content event, runs of 500 tokens (µs) / what a token adds",
     lambda r: (_get(r["gatekeeper"], "streaming", "cpu_us_per_content_event"),
                _get(r["gatekeeper"], "streaming", "marginal_cpu_us_per_content_event")),
     "{:.2f} / {:.2f}", "≤ 1"),
    ("gatekeeper", "floor: plain aiokafka doing its Kafka work, CPU per content event (µs) / ratio",
     lambda r: (_get(r["gatekeeper"], "streaming", "floor", "cpu_us_per_content_event"),
                _get(r["gatekeeper"], "streaming", "ratio_to_floor")), "{:.2f} / {:.2f}", ""),
    ("gatekeeper", "  batching (BATCH_MS=200): µs per content event / floor batching alike",
     lambda r: (_get(r["gatekeeper"], "streaming", "batched", "cpu_us_per_content_event"),
                _get(r["gatekeeper"], "streaming", "batched", "floor",
                     "cpu_us_per_content_event")), "{:.2f} / {:.2f}", "≤ 1"),
    ("producer", "events/s published by one worker",
     lambda r: _get(r["producer"], "throughput", "worker_per_second"), "{:,.0f}", ""),
    ("producer", "ratio to raw aiokafka, same bytes",
     lambda r: _get(r["producer"], "throughput", "ratio"), "{:.2f}", "≥ 0.7"),
    ("producer", "1,000 concurrent runs: makespan / ideal",
     lambda r: _get(r["producer"], "concurrency", "makespan_over_ideal"), "{:.2f}", "≤ 2"),
    ("producer", "the same runs by plain aiokafka, no runtime: makespan / ideal",
     lambda r: _get(r["producer"], "concurrency", "plain", "makespan_over_ideal"), "{:.2f}", ""),
    ("consumer", "POST → RUN_STARTED p50 overhead vs no-Kafka FastAPI (ms)",
     lambda r: _overhead(r["consumer"], "p50_ms"), "{:.1f}", "≤ 10"),
    ("consumer", "POST → RUN_STARTED p99 overhead vs no-Kafka FastAPI (ms)",
     lambda r: _overhead(r["consumer"], "p99_ms"), "{:.1f}", "≤ 40"),
    ("consumer", "floor: the relay's two Kafka hops alone, p50 / p99 (ms)",
     lambda r: (_get(r["consumer"], "kafka_floor", "p50_ms"),
                _get(r["consumer"], "kafka_floor", "p99_ms")), "{:.1f} / {:.1f}", ""),
    ("consumer", "relay overhead / floor at 200 runs/s, p50 / p99",
     lambda r: (_get(r["consumer"], "relay_overhead_to_floor", "p50_ms"),
                _get(r["consumer"], "relay_overhead_to_floor", "p99_ms")),
     "{:.1f}x / {:.1f}x", "≤ 2x"),
    ("consumer", "the same at 50 / 100 runs/s, p50 (cores busy at 200: relay / floor)",
     lambda r: (*(_swept(r["consumer"], rate, "ratio", "p50_ms") for rate in (50, 100)),
                _swept(r["consumer"], 200, "relay_cores"), _swept(r["consumer"], 200,
                                                                   "floor_cores")),
     "{:.1f}x / {:.1f}x ({:.2f} / {:.2f})", ""),
    ("consumer", "1,000 concurrent SSE streams: errors",
     lambda r: _get(r["consumer"], "streams", "errors"), "{}", "0"),
    ("consumer_scaling", "consumer CPU per streamed event, 2 instances / 1 (runs of 500)",
     lambda r: _get(r["consumer_scaling"], "ratio"), "{:.2f}", "≤ 1.2"),
    ("consumer_throughput", "events/s to SSE clients, 1 instance, runs of 500, 20 / 100 at a time",
     lambda r: _at_20_100(r, "sse", "events_per_s"), "{:,.0f} / {:,.0f}", ""),
    ("consumer_throughput", "floor: plain aiokafka reader of the same records, events/s",
     lambda r: _at_20_100(r, "plain", "events_per_s"), "{:,.0f} / {:,.0f}", ""),
    ("consumer_throughput", "SSE events/s / plain reader's, 20 / 100 at a time",
     lambda r: _at_20_100(r, "ratio"), "{:.2f} / {:.2f}", "≥ 0.5"),
    ("consumer_throughput", "  CPU per event, plain reader / consumer: the ratio with a core each",
     lambda r: _at_20_100(r, "cpu_ratio"), "{:.2f} / {:.2f}", ""),
    ("consumer_throughput", "  the same against aiokafka on its defaults (bench.bare_reader)",
     lambda r: _at_20_100(r, "ratio_bare"), "{:.2f} / {:.2f}", ""),
    ("consumer_throughput", "  the most the cores allow: service costing what the reader does "
                            "/ nothing, 20 / 100",
     lambda r: (*_at_20_100(r, "bounds", "ratio_as_reader"),
                *_at_20_100(r, "bounds", "ratio_without_service")),
     "{:.2f} / {:.2f}; {:.2f} / {:.2f}", ""),
    ("consumer_throughput", "CPU µs per event at 100: broker / consumer / stand-in / client / "
     "plain reader",
     lambda r: tuple(_get(r["consumer_throughput"], "phases", "100", *path) for path in (
         ("sse", "cpu_us_per_event", "broker"), ("sse", "cpu_us_per_event", "consumer"),
         ("sse", "cpu_us_per_event", "standin"), ("sse", "cpu_us_per_event", "client"),
         ("plain", "cpu_us_per_event", "plain_reader"))),
     "{:.1f} / {:.1f} / {:.1f} / {:.1f} / {:.1f}", ""),
    ("upstream", "upstream agent via the relay: POST → first token p50 / p99 (ms)",
     lambda r: (_get(r["upstream"], "relay", "latency", "first_event", "p50_ms"),
                _get(r["upstream"], "relay", "latency", "first_event", "p99_ms")),
     "{:.1f} / {:.1f}", ""),
    ("upstream", "floor: the same upstream called directly, p50 / p99 (ms)",
     lambda r: (_get(r["upstream"], "direct", "latency", "first_event", "p50_ms"),
                _get(r["upstream"], "direct", "latency", "first_event", "p99_ms")),
     "{:.1f} / {:.1f}", ""),
    ("upstream", "relay / direct: first token p50, events/s",
     lambda r: (_get(r["upstream"], "ratios", "first_event_p50"),
                _get(r["upstream"], "ratios", "events_per_second")), "{:.2f} / {:.2f}", ""),
    ("state_store", "1,000,000 threads: gatekeeper RSS restored / after 2,000 decisions (MB)",
     lambda r: (_get(r["state_store"], "first_start", "rss_mb"),
                _get(r["state_store"], "rss_after_2000_decisions_mb")), "{:.0f} / {:.0f}",
     "≤ 250"),
    ("state_store", "restart after SIGKILL to first decision, store / full replay (s)",
     lambda r: (_get(r["state_store"], "restart_with_store", "to_first_decision_s"),
                _get(r["state_store"], "restart_full_replay", "to_first_decision_s")),
     "{:.1f} / {:.1f}", ""),
    ("state_store", "  of which the takeover, store / full replay (ms)",
     lambda r: (_get(r["state_store"], "restart_with_store", "restore_ms"),
                _get(r["state_store"], "restart_full_replay", "restore_ms")),
     "{:.0f} / {:.0f}", "≤ 2,000"),
    ("state_store", "decision latency at 1,000/s, store / memory, p50 / p99",
     lambda r: (_get(r["state_store"], "latency_ratio_p50"),
                _get(r["state_store"], "latency_ratio_p99")), "{:.2f} / {:.2f}", "≤ 1.1"),
)


def _at_20_100(results: dict[str, dict[str, Any] | None], *path: str) -> tuple[Any, Any]:
    """``path`` in consumer_throughput's phases of 20 and of 100 runs at a time."""
    doc = results["consumer_throughput"]
    return _get(doc, "phases", "20", *path), _get(doc, "phases", "100", *path)


def _overhead(doc: dict[str, Any] | None, key: str) -> float | None:
    relay, base = _get(doc, "relay", key), _get(doc, "baseline", key)
    return None if relay is None or base is None else float(relay) - float(base)


def _fmt(fmt: str, value: Any) -> str:
    if value is None or (isinstance(value, tuple) and None in value):
        return "n/a"
    return fmt.format(*value) if isinstance(value, tuple) else fmt.format(value)


def summarise(results: dict[str, dict[str, Any] | None]) -> list[dict[str, str]]:
    """The headline figures as rows (also written to summary.json)."""
    return [
        {"bench": bench, "measure": measure, "value": _fmt(fmt, pick(results)), "target": target}
        for bench, measure, pick, fmt, target in HEADLINES
    ]


def plot_latency(gatekeeper: dict[str, Any] | None, path: Path) -> bool:
    """Decision latency (p50, p99) against offered load, from the gatekeeper sweep."""
    points = _get(gatekeeper, "sweep") or []
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = [p["offered_per_second"] for p in points]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    ax.plot(loads, [p["p50_ms"] for p in points], marker="o", label="p50")
    ax.plot(loads, [p["p99_ms"] for p in points], marker="s", label="p99")
    ax.axhline(50, color="grey", linestyle="--", linewidth=0.8, label="p99 target (50 ms)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("decision latency (ms): request in → committed decision")
    ax.set_title("agui-relay gatekeeper, 8 partitions, one instance")
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main() -> int:
    RESULTS.mkdir(parents=True, exist_ok=True)
    wanted = tuple(a for a in sys.argv[1:] if a in BENCHES) or BENCHES
    results: dict[str, dict[str, Any] | None] = dict.fromkeys(BENCHES)
    with broker() as bootstrap:
        for name in wanted:
            results[name] = run_bench(name, bootstrap)
    rows = summarise(results)
    table = Table(title="agui-relay benchmarks (this run)")
    for column in ("bench", "measure", "value", "target"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row.values())
    console.rule("[bold]summary")
    console.print(table)
    load = os.getloadavg()[0]
    console.print(f"[dim]{os.cpu_count()} CPUs, load average {load:.1f} at the end[/]")
    summary = {"rows": rows, "load_average": load, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                       time.gmtime())}
    (RESULTS / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    if plot_latency(results["gatekeeper"], PLOT):
        console.print(f"[dim]plot: {PLOT.relative_to(ROOT)} (the README shows it)[/]")
    failed = [n for n in wanted if results[n] is None]
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}[/]")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
