"""Consumer-service benchmark: POST → RUN_STARTED latency against no Kafka, and 1,000 streams.

    .venv/bin/python -m bench.consumer [--rate 200] [--seconds 10] [--streams 1000]

1. **Latency** at a fixed offered load: ``--rate`` runs/s of the ``scripted``
   agent (one short text message) for ``--seconds``, each on a new thread
   and a new connection, open loop (a run is sent on schedule whether or not
   earlier ones are done). Latency is from just before the request is
   written to the moment the client has read the ``RUN_STARTED`` frame.
   Measured through the whole relay (gatekeeper, one producer worker and the
   consumer service as their own processes, on 8 partitions) and, in the
   same run, against ``bench.consumer_baseline``: the same agent driven by
   the producer's runner inside a minimal FastAPI AG-UI endpoint with no
   Kafka in between. The difference of the percentiles is the overhead
   (targets: p50 ≤ 10 ms, p99 ≤ 40 ms). A third phase isolates the consumer
   service's own share: a second consumer-service instance (its own topics)
   in front of ``bench.consumer_standin``, which admits every request at once
   and writes the run's events without transactions or logic. CPU time per
   run of every process is reported for each phase; before the first, the
   relay's load warms the broker's JVM up until its JIT compilers are quiet
   (``warm_up``), unmeasured.
   Last, with the relay
   stopped, ``bench.relay_floor`` puts the same rate through the relay's two
   Kafka hops done in plain aiokafka with no logic and no HTTP: the floor
   under any relay's overhead on this machine. Where the relay's time goes is
   read from its own records afterwards (``hops``): each measured run's
   request, decision, start marker and ``RUN_STARTED`` carry their writer's
   CreateTime, so client send → request → decision → marker → RUN_STARTED →
   client read splits the latency by process without instrumenting any.
2. **Streams**: ``--streams`` runs of the ``scripted`` agent that each wait
   ``--hold`` seconds before finishing are started at ``--rate``; every one
   must get its RUN_STARTED, all must be open at once on the one consumer
   instance, and every one must end with RUN_FINISHED, with no error.

``--sweep RATE ...`` (default 50 100) measures the baseline, the relay and the floor at
more offered rates too, in the same processes, and prints the overhead's ratio to the
floor at each beside the cores the relay's processes and the broker keep busy (the
floor's alike): on a machine whose cores the relay's load nearly fills at ``--rate``,
its latency there is queueing for a core, and the sweep shows where it starts.

``--relay-env KEY=VALUE`` sets a setting of the relay's services (to compare
tunings in the same conditions). ``--latency-only`` runs the latency phases
only (baseline, relay, floor: the overhead and its ratio to the floor),
without the consumer-alone phase and the streams, and writes
``bench/results/consumer-latency.json``. Starts a local broker through the
launcher when ``KAFKA_BOOTSTRAP_SERVERS`` is unset. Prints a
table and writes ``bench/results/consumer.json``.
Benchmarks print; they assert nothing. Bounded: about two minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from rich.console import Console
from rich.table import Table

from bench.broker import broker, topic_prefix
from bench.relay_floor import floor
from contracts.headers import EVENT_TYPE
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.kafka.reader import TopicReader
from services.runtime.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "consumer.json"
LATENCY_RESULTS = ROOT / "bench" / "results" / "consumer-latency.json"
"""Where ``--latency-only`` writes (the full run's file keeps every phase)."""
PARTITIONS = 8
CPUCLOCK_SCHED = 2
"""The low bits of a process CPU-time clock id (``linux/posix-timers.h``): scheduler time."""
AGENTS = "scripted=services.producer.agents.scripted:agent"
WARMUP = 40
BROKER_WARMUP_S = 20.0
"""The relay's load offered before any phase is measured, in slices of this long, until
the broker's JIT compilers are quiet (``compiling``) or ``BROKER_WARMUP_MAX_S`` passed. A
fresh broker's JVM compiles its hot paths through its first minutes of load, and on two
cores the compiler threads took half the broker's CPU through the relay phase (perf: C2
42 %, C1 6 %), every hop queueing behind them (relay p50 171 ms, the floor's measured
after it 44; warmed 20 s first, 80 and 18; on the broker ``make bench`` had warmed for
minutes, 38 and 16): measured so, the relay and the floor both meet a broker in its
steady state, as a production one is."""
BROKER_WARMUP_MAX_S = 120.0
COMPILING_SHARE = 0.05
"""Compiler threads' share of a core under which the broker counts as warm."""
READ_TIMEOUT_S = 30.0
console = Console()


@dataclass
class Sample:
    """One run as the client saw it."""

    started_ms: float | None = None
    headers_ms: float | None = None
    finished: bool = False
    error: str | None = None
    thread: str | None = None
    sent_at: float | None = None
    """Wall clock (s) just before the request was written: compared with record
    CreateTimes (``hops``), which are wall clock too."""
    started_at: float | None = None
    """Wall clock (s) when the RUN_STARTED frame had been read."""


@dataclass
class Load:
    """What a load phase observed."""

    samples: list[Sample] = field(default_factory=list)
    open_now: int = 0
    open_peak: int = 0


def body_for(script: dict[str, Any]) -> bytes:
    thread = f"b-{uuid.uuid4().hex[:12]}"
    return orjson.dumps({
        "threadId": thread, "runId": f"{thread}-1", "protocolVersion": "1.0",
        "messages": [{"id": f"{thread}-u", "role": "user", "content": "hello"}],
        "forwardedProps": {"script": script}})


async def one_run(host: str, port: int, path: str, body: bytes, load: Load) -> Sample:
    """POST one run over a fresh connection; time the RUN_STARTED frame; read to the end."""
    sample = Sample(thread=orjson.loads(body).get("threadId"))
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    t0 = time.perf_counter()
    sample.sent_at = time.time()
    counted = False
    writer = None
    try:
        async with asyncio.timeout(READ_TIMEOUT_S + 60):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            seen = b""
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                seen += chunk
                if sample.headers_ms is None and b"\r\n\r\n" in seen:
                    sample.headers_ms = (time.perf_counter() - t0) * 1000
                if sample.started_ms is None:
                    if not seen.startswith(b"HTTP/1.1 200"):
                        if b"\r\n\r\n" in seen:
                            sample.error = seen.split(b"\r\n", 1)[0].decode()
                        continue
                    if b'"RUN_STARTED"' in seen:
                        sample.started_ms = (time.perf_counter() - t0) * 1000
                        sample.started_at = time.time()
                        counted = True
                        load.open_now += 1
                        load.open_peak = max(load.open_peak, load.open_now)
            if sample.error is None:
                sample.finished = b'"RUN_FINISHED"' in seen
                if not sample.finished:
                    sample.error = "stream ended without RUN_FINISHED"
    except (OSError, TimeoutError) as exc:
        sample.error = f"{type(exc).__name__}: {exc}"
    finally:
        if counted:
            load.open_now -= 1
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    return sample


def compiling_s(pid: int) -> float:
    """CPU seconds the JVM ``pid``'s JIT compiler threads have used so far."""
    ticks = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if "CompilerThre" in name:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def warm_up(url: str, rate: float, script: dict[str, Any], broker_pid: int | None) -> None:
    """The relay's load in ``BROKER_WARMUP_S`` slices until the broker's compilers are quiet
    (one slice when the broker is not a local process)."""
    started = time.monotonic()
    while True:
        before = compiling_s(broker_pid) if broker_pid is not None else 0.0
        await offered_load(url, rate, int(rate * BROKER_WARMUP_S), script)
        share = ((compiling_s(broker_pid) - before) / BROKER_WARMUP_S
                 if broker_pid is not None else 0.0)
        console.print(f"[dim]warming the broker up: its JIT compilers at {share:.0%} of a "
                      f"core over the last {BROKER_WARMUP_S:g} s[/]")
        if share < COMPILING_SHARE or time.monotonic() - started >= BROKER_WARMUP_MAX_S:
            return


async def offered_load(url: str, rate: float, count: int, script: dict[str, Any]) -> Load:
    """``count`` runs at ``rate``/s, open loop; every run's sample."""
    parsed = httpx.URL(url)
    host, port = parsed.host, parsed.port or 80
    load = Load()
    tasks = []
    start = time.perf_counter()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(
            one_run(host, port, "/agents/scripted", body_for(script), load)))
    load.samples = list(await asyncio.gather(*tasks))
    return load


def percentiles(load: Load) -> dict[str, Any]:
    times = sorted(s.started_ms for s in load.samples if s.started_ms is not None)
    errors = [s.error for s in load.samples if s.error]
    out: dict[str, Any] = {"runs": len(load.samples), "errors": len(errors),
                           "first_errors": sorted(set(errors))[:3]}
    if times:
        q = statistics.quantiles(times, n=100, method="inclusive")
        out.update(p50_ms=statistics.median(times), p90_ms=q[89], p99_ms=q[98],
                   max_ms=times[-1], mean_ms=statistics.fmean(times))
    heads = sorted(s.headers_ms for s in load.samples if s.headers_ms is not None)
    if heads:
        out["headers_p50_ms"] = statistics.median(heads)
    return out


HOPS = (
    ("client → request", "sent", "request", "consumer service: HTTP in, publish"),
    ("request → decision", "request", "decision",
     "gatekeeper: fetch, transaction in flight, decide"),
    ("decision → start marker", "decision", "marker",
     "its commit and markers, worker fetch, start"),
    ("start marker → RUN_STARTED", "marker", "started", "marker acknowledged, run started"),
    ("RUN_STARTED → client", "started", "read", "worker send, consumer fetch, SSE"),
)
"""The relay's hops as its records show them: (name, from, to, what it covers).

Each record's CreateTime is its writer's wall clock when the record was queued:
the decision's before its transaction commits (so "decision → start marker"
holds the rest of the gatekeeper's transaction), the start marker's before the
worker waits for its acknowledgement, RUN_STARTED's before the worker's send."""


async def hop_stamps(kafka: KafkaSettings, threads: set[str]) -> dict[str, dict[str, float]]:
    """Per thread of ``threads``: the CreateTime (s) of its first request, decision,
    checkpoint (the start marker) and ``RUN_STARTED`` event, read back from the topics."""
    topics = kafka.topics
    wanted = {"request": (topics.requests, None), "decision": (topics.decisions, None),
              "marker": (topics.checkpoints, None), "started": (topics.events, b"RUN_STARTED")}
    stamps: dict[str, dict[str, float]] = {}
    async with TopicReader(kafka, "bench-consumer-hops") as reader:
        for name, (topic, event_type) in wanted.items():
            for record in await reader.read_all(await reader.all_partitions(topic)):
                thread = record.key.decode("utf-8", "replace") if record.key else None
                if thread not in threads:
                    continue
                if event_type is not None and dict(record.headers).get(EVENT_TYPE) != event_type:
                    continue
                stamps.setdefault(thread, {}).setdefault(name, record.timestamp / 1000)
    return stamps


def hops(samples: list[Sample], stamps: dict[str, dict[str, float]]) -> dict[str, Any]:
    """p50 / p90 / p99 (ms) of each of ``HOPS`` over the runs that have every stamp."""
    spans: dict[str, list[float]] = {name: [] for name, *_ in HOPS}
    for sample in samples:
        at = stamps.get(sample.thread or "", {})
        points = {**at, "sent": sample.sent_at, "read": sample.started_at}
        if any(points.get(k) is None for _, a, b, _ in HOPS for k in (a, b)):
            continue
        for name, a, b, _ in HOPS:
            spans[name].append((points[b] - points[a]) * 1000)  # type: ignore[operator]
    out: dict[str, Any] = {}
    for name, values in spans.items():
        if len(values) >= 2:
            q = statistics.quantiles(values, n=100, method="inclusive")
            out[name] = {"p50_ms": statistics.median(values), "p90_ms": q[89],
                         "p99_ms": q[98], "runs": len(values)}
    return out


@contextlib.asynccontextmanager
async def processes(specs: list[tuple[str, list[str], dict[str, str]]], log_dir: Path
                    ) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Child processes (``name``, argv, env), stopped by their own pids on the way out."""
    started: list[asyncio.subprocess.Process] = []
    try:
        for name, argv, env in specs:
            with (log_dir / f"{name}.log").open("ab") as log:
                started.append(await asyncio.create_subprocess_exec(
                    sys.executable, *argv, cwd=ROOT, env=env, stdout=log,
                    stderr=asyncio.subprocess.STDOUT, start_new_session=True))
        yield started
    finally:
        for process in started:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


async def wait_http(url: str, path: str, log_dir: Path, within_s: float = 90) -> None:
    async with httpx.AsyncClient(timeout=2) as http, asyncio.timeout(within_s):
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url + path)).status_code in (200, 405):
                    return
            await asyncio.sleep(0.2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, to the nanosecond.

    Read from the process's CPU-time clock (``clock_getcpuclockid``: Linux encodes
    it from the pid, all its threads summed, those ended too), not ``/proc/<pid>/stat``,
    whose clock ticks (10 ms) were a tenth of a short phase's gatekeeper figure.
    """
    try:
        return time.clock_gettime_ns(((~pid) << 3) | CPUCLOCK_SCHED) / 1e9
    except OSError:  # gone, or not ours
        return 0.0


def log_count(path: Path, needle: str) -> int:
    return path.read_text("utf-8", "replace").count(needle) if path.exists() else 0


async def wait_log(path: Path, needle: str, within_s: float = 90) -> None:
    async with asyncio.timeout(within_s):
        while not await asyncio.to_thread(log_count, path, needle):  # noqa: ASYNC110
            await asyncio.sleep(0.2)


async def bench(bootstrap: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    prefix = topic_prefix("bc")
    kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix,
                          partitions=PARTITIONS)
    await ensure_topics(kafka, ("scripted",))
    alone = kafka.model_copy(update={"topic_prefix": f"{prefix}alone"})
    await ensure_topics(alone, ("scripted",))
    relay_port, baseline_port = launcher.free_port(), launcher.free_port()
    alone_port = launcher.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    env.update(KAFKA_BOOTSTRAP_SERVERS=bootstrap, AGUI_TOPIC_PREFIX=prefix,
               AGUI_PARTITIONS=str(PARTITIONS), AGUI_AGENTS=AGENTS, AGUI_LOG_FORMAT="json",
               AGUI_LOG_LEVEL="WARNING", AGUI_HTTP_PORT=str(relay_port),
               AGUI_MAX_CONCURRENT_RUNS=str(max(args.streams * 2, 256)),
               PYTHONUNBUFFERED="1")
    relay_env = {**env, **dict(kv.split("=", 1) for kv in args.relay_env)}
    specs = [("baseline", ["-m", "bench.consumer_baseline", str(baseline_port)], env),
             ("gatekeeper", ["-m", "services.gatekeeper"],
              {**relay_env, "AGUI_LOG_LEVEL": "INFO"}),
             ("producer", ["-m", "services.producer"], {**relay_env, "AGUI_LOG_LEVEL": "INFO"}),
             ("consumer", ["-m", "services.consumer"], relay_env),
             ("standin", ["-m", "bench.consumer_standin"],
              {**env, "AGUI_TOPIC_PREFIX": alone.topic_prefix}),
             ("consumer-alone", ["-m", "services.consumer"],
              {**env, "AGUI_TOPIC_PREFIX": alone.topic_prefix, "AGUI_HTTP_PORT": str(alone_port)})]
    if args.latency_only:  # no consumer-alone phase: neither it nor its stand-in runs
        specs = specs[:4]
    results: dict[str, Any] = {"rate": args.rate, "seconds": args.seconds,
                               "partitions": PARTITIONS, "agent": "scripted",
                               "relay_env": args.relay_env}
    script = {"text": "Hello from the benchmark."}
    count = int(args.rate * args.seconds)
    from bench.consumer_throughput import listening_pid  # it imports this module

    broker_pid = listening_pid(int(bootstrap.split(",")[0].rsplit(":", 1)[1]))
    async with processes(specs, log_dir) as children:
        pids = {name: child.pid for (name, _, _), child in zip(specs, children, strict=True)}
        if broker_pid is not None:  # every phase's runs cost the broker: charged to each
            pids["broker"] = broker_pid
        relay_url = f"http://127.0.0.1:{relay_port}"
        baseline_url = f"http://127.0.0.1:{baseline_port}"
        alone_url = f"http://127.0.0.1:{alone_port}"
        await wait_http(baseline_url, "/agents/scripted", log_dir)
        await wait_http(relay_url, "/readyz", log_dir)
        if not args.latency_only:
            await wait_http(alone_url, "/readyz", log_dir)
        await wait_log(log_dir / "gatekeeper.log", "assigned partitions")
        await wait_log(log_dir / "producer.log", "own partitions")
        console.print(f"[dim]broker {bootstrap}; relay {relay_url}; baseline {baseline_url}[/]")
        phases = {"baseline": (baseline_url, ("baseline",)),
                  "relay": (relay_url, ("gatekeeper", "producer", "consumer")),
                  "consumer_alone": (alone_url, ("consumer-alone", "standin"))}
        if args.latency_only:
            del phases["consumer_alone"]
        measured: list[Sample] = []
        await warm_up(relay_url, args.rate, script, broker_pid)
        for name, (url, phase_charged) in phases.items():
            charged = (*phase_charged, "broker") if "broker" in pids else phase_charged
            await offered_load(url, args.rate, WARMUP, script)
            before = {n: cpu_seconds(pids[n]) for n in charged}
            client_before = time.process_time()
            load = await offered_load(url, args.rate, count, script)
            results[name] = percentiles(load)
            cpu = {n: (cpu_seconds(pids[n]) - before[n]) * 1000 / count for n in charged}
            cpu["client"] = (time.process_time() - client_before) * 1000 / count
            results[name]["cpu_ms_per_run"] = {n: round(v, 2) for n, v in cpu.items()}
            console.print(f"[dim]{name}: {results[name]}[/]")
            if name == "relay":
                measured = load.samples
        sweep = [await load_point(rate, args.seconds, script, pids, baseline_url, relay_url)
                 for rate in args.sweep]
        if not args.latency_only:
            streams = await offered_load(relay_url, args.rate, args.streams,
                                         {"delayMs": int(args.hold * 1000)})
            results["streams"] = {**percentiles(streams), "requested": args.streams,
                                  "open_peak": streams.open_peak,
                                  "finished": sum(s.finished for s in streams.samples)}
    threads = {s.thread for s in measured if s.thread is not None}
    results["relay_hops"] = hops(measured, await hop_stamps(kafka, threads))
    results["kafka_floor"] = await floor(bootstrap, args.rate, args.seconds)
    console.print(f"[dim]kafka floor: {results['kafka_floor']}[/]")
    for point in sweep:
        point["kafka_floor"] = await floor(bootstrap, point["rate"], args.seconds)
    results["sweep"] = [swept(p) for p in (*sweep, {"rate": args.rate, **results})]
    base = results["baseline"]
    for name in ("relay", "consumer_alone"):
        if name in results and "p50_ms" in base and "p50_ms" in results[name]:
            results[f"{name}_overhead"] = {k: results[name][k] - base[k]
                                           for k in ("p50_ms", "p90_ms", "p99_ms")}
    over, kafka_floor = results.get("relay_overhead", {}), results["kafka_floor"]
    if over:
        results["relay_overhead_to_floor"] = {
            k: over[k] / kafka_floor[k] for k in ("p50_ms", "p90_ms", "p99_ms")}
    results["load_average"] = os.getloadavg()
    return results


async def load_point(rate: float, seconds: float, script: dict[str, Any], pids: dict[str, int],
                     baseline_url: str, relay_url: str) -> dict[str, Any]:
    """The baseline and the relay at one more offered rate (``--sweep``), with each relay
    process's CPU per run; the floor at that rate is measured after the relay stops."""
    point: dict[str, Any] = {"rate": rate}
    count = int(rate * seconds)
    for name, url, charged in (("baseline", baseline_url, ()),
                               ("relay", relay_url, ("gatekeeper", "producer", "consumer"))):
        charged = (*charged, "broker") if "broker" in pids else charged
        await offered_load(url, rate, WARMUP, script)
        before = {n: cpu_seconds(pids[n]) for n in charged}
        point[name] = percentiles(await offered_load(url, rate, count, script))
        point[name]["cpu_ms_per_run"] = {
            n: round((cpu_seconds(pids[n]) - before[n]) * 1000 / count, 2) for n in charged}
    console.print(f"[dim]at {rate:g} runs/s: {point}[/]")
    return point


def swept(point: dict[str, Any]) -> dict[str, Any]:
    """One rate's overhead, floor and ratio, and the cores the relay's processes and the
    broker kept busy: the ratio grows as those approach the machine's cores."""
    base, relay, kafka_floor = point["baseline"], point["relay"], point["kafka_floor"]
    out: dict[str, Any] = {"rate": point["rate"]}
    if "p50_ms" in base and "p50_ms" in relay:
        over = {k: relay[k] - base[k] for k in ("p50_ms", "p99_ms")}
        out.update(overhead=over, floor={k: kafka_floor[k] for k in ("p50_ms", "p99_ms")},
                   ratio={k: over[k] / kafka_floor[k] for k in ("p50_ms", "p99_ms")})
    out["relay_cores"] = _cores(relay["cpu_ms_per_run"], point["rate"])
    out["floor_cores"] = _cores(kafka_floor.get("cpu_ms_per_request", {}), point["rate"])
    out["errors"] = relay["errors"]
    return out


def _cores(cpu_ms: dict[str, float], rate: float) -> float:
    """Cores kept busy by the processes charged per run, the load generator left out."""
    return round(sum(v for n, v in cpu_ms.items() if n != "client" and "load" not in n)
                 * rate / 1000, 2)


def report(r: dict[str, Any]) -> None:
    table = Table(title=f"consumer service benchmark: POST → RUN_STARTED at {r['rate']:g} runs/s "
                        f"for {r['seconds']:g} s ({r['partitions']} partitions)")
    table.add_column("measure")
    for name in ("baseline (no Kafka)", "relay", "overhead", "consumer alone", "its overhead",
                 "target"):
        table.add_column(name, justify="right")
    empty: dict[str, Any] = {"runs": 0, "errors": 0, "cpu_ms_per_run": {}}
    base, relay, alone = r["baseline"], r["relay"], r.get("consumer_alone", empty)
    over, alone_over = r.get("relay_overhead", {}), r.get("consumer_alone_overhead", {})
    targets = {"p50_ms": "≤ 10 ms", "p99_ms": "≤ 40 ms"}

    def ms(doc: dict[str, Any], key: str) -> str:
        return f"{doc[key]:.1f}" if key in doc else ""

    for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "headers_p50_ms"):
        label = "p50 to headers (ms)" if key == "headers_p50_ms" else key.replace("_ms", " (ms)")
        table.add_row(label, ms(base, key), ms(relay, key), ms(over, key), ms(alone, key),
                      ms(alone_over, key), targets.get(key, ""))
    table.add_row("runs / errors", f"{base['runs']} / {base['errors']}",
                  f"{relay['runs']} / {relay['errors']}", "",
                  f"{alone['runs']} / {alone['errors']}", "", "0 errors")
    console.print(table)
    f = r["kafka_floor"]
    console.print(f"Kafka floor at {f['rate']:g} requests/s (the relay's transactional and worker "
                  f"hops in plain aiokafka, no logic, no HTTP; bench.relay_floor): p50 "
                  f"{f['p50_ms']:.1f} / p90 {f['p90_ms']:.1f} / p99 {f['p99_ms']:.1f} ms, "
                  f"{f['seen']} of {f['requests']} seen: no relay on these hops can have a "
                  "lower overhead")
    ratio = r.get("relay_overhead_to_floor")
    if ratio:
        console.print(f"Relay overhead / floor: p50 {ratio['p50_ms']:.1f}x / p90 "
                      f"{ratio['p90_ms']:.1f}x / p99 {ratio['p99_ms']:.1f}x (target ≤ 2x)")
    hop_table = Table(title="Where the relay's time goes (each run's records' CreateTime, ms)")
    for column in ("hop", "p50", "p90", "p99", "covers"):
        hop_table.add_column(column, justify="left" if column in ("hop", "covers") else "right")
    for name, _, _, covers in HOPS:
        h = r.get("relay_hops", {}).get(name)
        if h is not None:
            hop_table.add_row(name, f"{h['p50_ms']:.1f}", f"{h['p90_ms']:.1f}",
                              f"{h['p99_ms']:.1f}", covers)
    console.print(hop_table)
    cpu = Table(title="CPU time per run (ms), by process")
    cpu.add_column("phase")
    cpu.add_column("processes")
    for doc_name, doc in (("baseline", base), ("relay", relay), ("consumer alone", alone)):
        cpu.add_row(doc_name, ", ".join(f"{k} {v:.2f}" for k, v in doc["cpu_ms_per_run"].items()))
    cpu.add_row("kafka floor", ", ".join(
        f"{k} {v:.2f}" for k, v in f.get("cpu_ms_per_request", {}).items()))
    console.print(cpu)
    for name in ("baseline", "relay", "consumer_alone", "streams"):
        if name in r and r[name]["errors"]:
            console.print(f"[red]{name} errors:[/] {r[name]['first_errors']}")
    if len(r.get("sweep", ())) > 1:
        sweep = Table(title="Relay overhead against the floor by offered load (each rate's "
                            "floor measured in this run)")
        for column in ("runs/s", "overhead p50 / p99 (ms)", "floor p50 / p99 (ms)",
                       "ratio p50 / p99", "cores busy: relay / floor", "errors"):
            sweep.add_column(column, justify="right")
        for p in sorted(r["sweep"], key=lambda p: p["rate"]):
            if "ratio" not in p:
                continue
            o, f, q = p["overhead"], p["floor"], p["ratio"]
            sweep.add_row(f"{p['rate']:g}", f"{o['p50_ms']:.1f} / {o['p99_ms']:.1f}",
                          f"{f['p50_ms']:.1f} / {f['p99_ms']:.1f}",
                          f"{q['p50_ms']:.1f}x / {q['p99_ms']:.1f}x",
                          f"{p['relay_cores']:.2f} / {p['floor_cores']:.2f}", str(p["errors"]))
        console.print(sweep)
        console.print(f"[dim]cores busy: CPU per run of the relay's processes and the broker "
                      f"(the floor's: its two hops and the broker) times the rate, of "
                      f"{os.cpu_count()} cores; target ≤ 2x at {r['rate']:g} runs/s[/]")
    console.print(f"[dim]load average at the end: {r['load_average']}[/]")
    if "streams" not in r:
        return
    s = r["streams"]
    streams = Table(title=f"{s['requested']} concurrent SSE streams on one consumer instance")
    for column in ("open at once", "finished", "errors", "RUN_STARTED p50 / p99 (ms)"):
        streams.add_column(column, justify="right")
    streams.add_row(str(s["open_peak"]), str(s["finished"]), str(s["errors"]),
                    f"{s.get('p50_ms', 0):.0f} / {s.get('p99_ms', 0):.0f}")
    console.print(streams)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--hold", type=float, default=8.0,
                        help="seconds each of the concurrent streams stays open")
    parser.add_argument("--relay-env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the relay's gatekeeper, worker and consumer "
                             "service (repeatable), e.g. "
                             "AGUI_GATEKEEPER_TRANSACTION_INTERVAL_MS=10")
    parser.add_argument("--sweep", type=float, nargs="*", default=[50.0, 100.0],
                        metavar="RATE",
                        help="more offered rates (runs/s) at which the relay's overhead and "
                             "the floor are measured too (default 50 100; none: --sweep)")
    parser.add_argument("--latency-only", action="store_true",
                        help="only the baseline, relay and floor phases (the overhead, its "
                             "ratio to the floor and the relay's hops)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="agui-bench-logs-") as logs:
        results = asyncio.run(bench(bootstrap, args, Path(logs)))
    report(results)
    path = LATENCY_RESULTS if args.latency_only else RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    console.print(f"[dim]written {path.relative_to(ROOT)}[/]")


if __name__ == "__main__":
    main()
