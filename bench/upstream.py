"""Upstream-agent benchmark: an AG-UI service reached through the relay against called directly.

    .venv/bin/python -m bench.upstream [--quick] [--latency-runs 100] [--runs 16]
                                       [--events 500] [--concurrency 4]

One upstream AG-UI service (``bench.upstream_app``: FastAPI under uvicorn,
each run one message of ``--events`` ``TEXT_MESSAGE_CONTENT`` deltas, no
sleeping) is measured two ways in the same run, on the same machine:

* **direct** (the floor): the client POSTs the run to the upstream and reads
  its SSE answer;
* **relay**: the client POSTs the run to the consumer service, whose agent
  is ``AGUI_AGENTS=streamer=http://127.0.0.1:PORT/agui``; the run goes
  consumer → ``requests`` → gatekeeper → ``dispatch`` → worker, which POSTs
  to the same upstream and publishes its events to ``events``, which the
  consumer streams back (gatekeeper, worker, consumer and upstream each
  their own process, 8 partitions).

Two phases, each first warmed up:

1. **Latency**: ``--latency-runs`` one-token runs, one after another. POST
   → first event is from just before the request is sent to the client
   having read the first ``TEXT_MESSAGE_CONTENT`` (the first token: through
   the relay it has crossed the upstream, the worker and both Kafka hops);
   POST → first frame (``RUN_STARTED``, which the relay's runtime writes
   before it calls the upstream) is shown too.
2. **Throughput**: ``--runs`` runs of ``--events`` tokens, ``--concurrency``
   at a time: events/s is every event read over the phase's wall time, and
   each run's own streaming rate (its frames over first to last frame) is
   shown as a median. CPU time per event of every process (the upstream's
   included) is reported for this phase.

Ratios: relay over direct for latency (≥ 1, lower is better) and for events/s
(≤ 1, higher is better). Starts a local broker when
``KAFKA_BOOTSTRAP_SERVERS`` is unset. Prints a table, writes
``bench/results/upstream.json``; asserts nothing. Bounded: well under a
minute on an idle machine, ``--quick`` a fraction of that.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from rich.console import Console
from rich.table import Table

from bench.broker import broker, topic_prefix
from bench.consumer import cpu_seconds, processes, wait_http, wait_log
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "upstream.json"
PARTITIONS = 8
AGENT = "streamer"
WARMUP = 5
READ_TIMEOUT_S = 60.0
CONTENT = b'"TEXT_MESSAGE_CONTENT"'
RUN_ERROR = b'"RUN_ERROR"'
console = Console()


@dataclass
class Sample:
    """One run as the client saw it (times in seconds from just before its POST)."""

    first_frame_s: float | None = None
    first_content_s: float | None = None
    last_frame_s: float | None = None
    frames: int = 0
    contents: int = 0
    error: str | None = None


def body_for(events: int) -> bytes:
    thread = f"bu-{uuid.uuid4().hex[:12]}"
    return orjson.dumps({
        "threadId": thread, "runId": f"{thread}-1", "protocolVersion": "1.0", "state": {},
        "messages": [{"id": f"{thread}-u", "role": "user", "content": "stream"}],
        "tools": [], "context": [], "forwardedProps": {"events": events}})


async def one_run(http: httpx.AsyncClient, url: str, events: int) -> Sample:
    """POST one run; note its first frame, first token and last frame; count what it read."""
    sample, body, pending = Sample(), body_for(events), b""
    t0 = time.perf_counter()
    try:
        async with http.stream("POST", url, content=body, headers={
                "Content-Type": "application/json", "Accept": "text/event-stream"}) as response:
            if response.status_code != 200:
                sample.error = f"HTTP {response.status_code}"
                return sample
            async for chunk in response.aiter_raw():
                *frames, pending = (pending + chunk).split(b"\n\n")
                now = time.perf_counter() - t0
                for frame in frames:
                    if b"data:" not in frame:
                        continue
                    sample.frames += 1
                    sample.last_frame_s = now
                    if sample.first_frame_s is None:
                        sample.first_frame_s = now
                    if CONTENT in frame:
                        sample.contents += 1
                        if sample.first_content_s is None:
                            sample.first_content_s = now
                    elif RUN_ERROR in frame:
                        sample.error = frame.decode("utf-8", "replace")[-200:]
    except httpx.HTTPError as exc:
        sample.error = f"{type(exc).__name__}: {exc}"
    if sample.error is None and sample.contents != events:
        sample.error = f"{sample.contents} of {events} tokens"
    return sample


async def runs(http: httpx.AsyncClient, url: str, count: int, events: int,
               concurrency: int) -> list[Sample]:
    """``count`` runs of ``events`` tokens, at most ``concurrency`` in flight."""
    gate = asyncio.Semaphore(concurrency)

    async def gated() -> Sample:
        async with gate:
            return await one_run(http, url, events)

    return list(await asyncio.gather(*(gated() for _ in range(count))))


def ms_percentiles(values: list[float]) -> dict[str, float]:
    times = sorted(v * 1000 for v in values)
    if not times:
        return {}
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    return {"p50_ms": statistics.median(times), "p90_ms": q[89], "p99_ms": q[98],
            "max_ms": times[-1]}


def errors_of(samples: list[Sample]) -> dict[str, Any]:
    errors = [s.error for s in samples if s.error]
    return {"runs": len(samples), "errors": len(errors), "first_errors": sorted(set(errors))[:3]}


async def measure(url: str, args: argparse.Namespace, pids: dict[str, int]) -> dict[str, Any]:
    """Both phases against ``url``; CPU of the ``pids`` charged to the throughput phase."""
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=READ_TIMEOUT_S, limits=limits) as http:
        await runs(http, url, WARMUP, 1, 1)
        latency = await runs(http, url, args.latency_runs, 1, 1)
        await runs(http, url, WARMUP, args.events, args.concurrency)
        before = {n: cpu_seconds(pid) for n, pid in pids.items()}
        client_before, started = time.process_time(), time.perf_counter()
        streamed = await runs(http, url, args.runs, args.events, args.concurrency)
        wall = time.perf_counter() - started
        client_cpu = time.process_time() - client_before
    frames = sum(s.frames for s in streamed)
    cpu = {n: (cpu_seconds(pid) - before[n]) * 1e6 / max(frames, 1) for n, pid in pids.items()}
    cpu["client"] = client_cpu * 1e6 / max(frames, 1)
    rates = [(s.frames - 1) / (s.last_frame_s - s.first_frame_s) for s in streamed
             if s.frames > 1 and s.last_frame_s and s.first_frame_s is not None
             and s.last_frame_s > s.first_frame_s]
    return {
        "latency": {**errors_of(latency),
                    "first_event": ms_percentiles(
                        [s.first_content_s for s in latency if s.first_content_s is not None]),
                    "first_frame": ms_percentiles(
                        [s.first_frame_s for s in latency if s.first_frame_s is not None])},
        "throughput": {**errors_of(streamed), "events": frames, "wall_s": wall,
                       "events_per_second": frames / wall if wall else 0.0,
                       "run_rate_p50": statistics.median(rates) if rates else None,
                       "first_event": ms_percentiles([s.first_content_s for s in streamed
                                                      if s.first_content_s is not None]),
                       "cpu_us_per_event": {n: round(v, 1) for n, v in cpu.items()}},
    }


async def bench(bootstrap: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    prefix = topic_prefix("bu")
    kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix,
                          partitions=PARTITIONS)
    await ensure_topics(kafka, (AGENT,))
    relay_port, upstream_port = launcher.free_port(), launcher.free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}/agui"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    env.update(KAFKA_BOOTSTRAP_SERVERS=bootstrap, AGUI_TOPIC_PREFIX=prefix,
               AGUI_PARTITIONS=str(PARTITIONS), AGUI_AGENTS=f"{AGENT}={upstream_url}",
               AGUI_LOG_FORMAT="json", AGUI_LOG_LEVEL="WARNING",
               AGUI_HTTP_PORT=str(relay_port), PYTHONUNBUFFERED="1")
    specs = [("upstream", ["-m", "bench.upstream_app", str(upstream_port)], env),
             ("gatekeeper", ["-m", "services.gatekeeper"], {**env, "AGUI_LOG_LEVEL": "INFO"}),
             ("producer", ["-m", "services.producer"], {**env, "AGUI_LOG_LEVEL": "INFO"}),
             ("consumer", ["-m", "services.consumer"], env)]
    results: dict[str, Any] = {"partitions": PARTITIONS, "events_per_run": args.events,
                               "latency_runs": args.latency_runs, "runs": args.runs,
                               "concurrency": args.concurrency}
    async with processes(specs, log_dir) as children:
        pids = {name: child.pid for (name, _, _), child in zip(specs, children, strict=True)}
        relay_url = f"http://127.0.0.1:{relay_port}"
        await wait_http(f"http://127.0.0.1:{upstream_port}", "/agui", log_dir)
        await wait_http(relay_url, "/readyz", log_dir)
        await wait_log(log_dir / "gatekeeper.log", "assigned partitions")
        await wait_log(log_dir / "producer.log", "own partitions")
        console.print(f"[dim]broker {bootstrap}; relay {relay_url}; upstream {upstream_url}[/]")
        results["direct"] = await measure(upstream_url, args, {"upstream": pids["upstream"]})
        console.print(f"[dim]direct: {results['direct']}[/]")
        results["relay"] = await measure(f"{relay_url}/agents/{AGENT}", args, pids)
        console.print(f"[dim]relay: {results['relay']}[/]")
    results["ratios"] = ratios(results["direct"], results["relay"])
    results["load_average"] = os.getloadavg()
    return results


def ratios(direct: dict[str, Any], relay: dict[str, Any]) -> dict[str, float | None]:
    """Relay over direct: first-event latency (p50, p99) and events/s."""
    def over(path: tuple[str, ...]) -> float | None:
        a, b = relay, direct
        for key in path:
            a, b = a.get(key, {}), b.get(key, {})
        return float(a) / float(b) if isinstance(a, float) and isinstance(b, float) and b else None

    return {"first_event_p50": over(("latency", "first_event", "p50_ms")),
            "first_event_p99": over(("latency", "first_event", "p99_ms")),
            "events_per_second": over(("throughput", "events_per_second")),
            "run_rate_p50": over(("throughput", "run_rate_p50"))}


def report(r: dict[str, Any]) -> None:
    direct, relay, ratio = r["direct"], r["relay"], r["ratios"]
    table = Table(title=f"upstream AG-UI agent through the relay vs called directly "
                        f"({r['latency_runs']} one-token runs; {r['runs']} runs of "
                        f"{r['events_per_run']} tokens, {r['concurrency']} at a time)")
    for column in ("measure", "direct (floor)", "relay", "relay / direct"):
        table.add_column(column, justify="left" if column == "measure" else "right")

    def num(doc: dict[str, Any], *path: str, fmt: str = "{:.1f}") -> str:
        for key in path:
            doc = doc.get(key) if isinstance(doc, dict) else None  # type: ignore[assignment]
        return fmt.format(doc) if isinstance(doc, int | float) else "n/a"

    def ratio_of(key: str) -> str:
        return f"{ratio[key]:.2f}" if ratio.get(key) is not None else ""

    for label, path, key in (
            ("POST → first token p50 (ms)", ("latency", "first_event", "p50_ms"),
             "first_event_p50"),
            ("POST → first token p90 (ms)", ("latency", "first_event", "p90_ms"), ""),
            ("POST → first token p99 (ms)", ("latency", "first_event", "p99_ms"),
             "first_event_p99"),
            ("POST → first frame p50 (ms)", ("latency", "first_frame", "p50_ms"), ""),
            ("POST → first token p50 under load (ms)",
             ("throughput", "first_event", "p50_ms"), "")):
        table.add_row(label, num(direct, *path), num(relay, *path), ratio_of(key))
    table.add_row("events/s, all runs", num(direct, "throughput", "events_per_second",
                                             fmt="{:,.0f}"),
                  num(relay, "throughput", "events_per_second", fmt="{:,.0f}"),
                  ratio_of("events_per_second"))
    table.add_row("events/s within one run (p50)",
                  num(direct, "throughput", "run_rate_p50", fmt="{:,.0f}"),
                  num(relay, "throughput", "run_rate_p50", fmt="{:,.0f}"),
                  ratio_of("run_rate_p50"))
    for phase in ("latency", "throughput"):
        table.add_row(f"{phase} runs / errors",
                      f"{direct[phase]['runs']} / {direct[phase]['errors']}",
                      f"{relay[phase]['runs']} / {relay[phase]['errors']}", "")
    console.print(table)
    cpu = Table(title="CPU time per event (µs), throughput phase, by process")
    cpu.add_column("path")
    cpu.add_column("processes")
    cpu.add_column("total", justify="right")
    for name, doc in (("direct", direct), ("relay", relay)):
        per = doc["throughput"]["cpu_us_per_event"]
        cpu.add_row(name, ", ".join(f"{k} {v:.1f}" for k, v in per.items()),
                    f"{sum(per.values()):.1f}")
    console.print(cpu)
    console.print(f"[dim]{os.cpu_count()} CPUs, load average at the end: {r['load_average']}[/]")
    for name, doc in (("direct", direct), ("relay", relay)):
        for phase in ("latency", "throughput"):
            if doc[phase]["errors"]:
                console.print(f"[red]{name} {phase} errors:[/] {doc[phase]['first_errors']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--latency-runs", type=int, default=100)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--quick", action="store_true",
                        help="20 latency runs and 8 streamed runs (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.latency_runs, args.runs = min(args.latency_runs, 20), min(args.runs, 8)
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="agui-bench-logs-") as logs:
        results = asyncio.run(bench(bootstrap, args, Path(logs)))
    report(results)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    console.print(f"[dim]written {RESULTS.relative_to(ROOT)}[/]")


if __name__ == "__main__":
    main()
