"""Consumer-service scale-out benchmark: CPU per streamed event, one instance against two.

    .venv/bin/python -m bench.consumer_scaling [--runs 200] [--concurrency 20] [--tokens 500]

Instances of the consumer service own partitions (one consumer group over
``decisions`` and ``events``): adding one should add capacity, not cost. The
same load is put through one instance, then through two (each phase on its
own topics, so its own group): ``--runs`` runs of ``--tokens``
``TEXT_MESSAGE_CONTENT`` events each (plus the run's start, message start and
end, and its end), ``--concurrency`` at a time, each posted to a random
instance (with two, about half are forwarded to the other). The events come
from ``bench.consumer_standin``, which admits every request at once and
writes the run without transactions or logic, so only the consumer service's
work differs between the phases. Measured: the CPU time of every consumer
process (its CPU-time clock), summed, per event the clients received; the ratio
of the two phases is the headline (target ≤ 1.2x: before partition
ownership every instance read every event, and the ratio was about 1.8x).
Each phase measures ``--repeats`` rounds of that load on the same processes
and reports the round of median CPU (one 3-second round varied by ±7% from
run to run; every round's figure is printed and kept). Also printed: events
per second delivered, and the standin's CPU.

Starts a local broker when ``KAFKA_BOOTSTRAP_SERVERS`` is unset. Writes
``bench/results/consumer_scaling.json``. Benchmarks print; they assert
nothing. Bounded: every run has a timeout; about a minute and a half.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from bench.broker import broker, topic_prefix
from bench.consumer import cpu_seconds, processes, wait_http
from bench.sse_client import post_sse
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "consumer_scaling.json"
PARTITIONS = 8
RUN_TIMEOUT_S = 120.0
console = Console()


async def one_run(url: str) -> tuple[int, str | None]:
    """Post one run; the events (``data:`` frames) received, and an error if it failed."""
    thread = f"s-{uuid.uuid4().hex[:12]}"
    body = {"threadId": thread, "runId": f"{thread}-1",
            "messages": [{"id": "u", "role": "user", "content": "hello"}]}
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            return await post_sse(url, "/agents/scripted", body)
    except (OSError, ValueError, asyncio.IncompleteReadError, TimeoutError) as exc:
        return 0, type(exc).__name__


async def load(urls: list[str], runs: int, concurrency: int) -> dict[str, Any]:
    """``runs`` runs, ``concurrency`` at a time, each to a random one of ``urls``."""
    rng = random.Random(15)
    queue = list(range(runs))
    events, errors = 0, []

    async def worker() -> None:
        nonlocal events
        while queue:
            queue.pop()
            got, error = await one_run(rng.choice(urls))
            events += got
            if error:
                errors.append(error)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"runs": runs, "events": events, "seconds": round(elapsed, 2),
            "events_per_s": round(events / elapsed), "errors": len(errors),
            "first_errors": sorted(set(errors))[:3]}


async def phase(bootstrap: str, instances: int, args: argparse.Namespace,
                log_dir: Path) -> dict[str, Any]:
    prefix = topic_prefix(f"cs{instances}")
    kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix,
                          partitions=PARTITIONS)
    await ensure_topics(kafka, ("scripted",))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    env.update(KAFKA_BOOTSTRAP_SERVERS=bootstrap, AGUI_TOPIC_PREFIX=prefix,
               AGUI_PARTITIONS=str(PARTITIONS), AGUI_AGENTS="scripted=x:y",
               AGUI_LOG_FORMAT="json", AGUI_LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1",
               AGUI_BENCH_TOKENS=str(args.tokens))
    ports = [launcher.free_port() for _ in range(instances)]
    specs = [("standin", ["-m", "bench.consumer_standin"], env)]
    specs += [(f"consumer{instances}-{i}", ["-m", "services.consumer"],
               {**env, "AGUI_HTTP_PORT": str(port)}) for i, port in enumerate(ports)]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    async with processes(specs, log_dir) as children:
        for url in urls:
            await wait_http(url, "/readyz", log_dir)
        await load(urls, args.concurrency, args.concurrency)  # warm up, groups settled
        pids = [child.pid for child in children]
        rounds = []
        for _ in range(args.repeats):
            before = [cpu_seconds(pid) for pid in pids]
            measured = await load(urls, args.runs, args.concurrency)
            spent = [cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
            events = max(measured["events"], 1)
            measured["consumer_cpu_us_per_event"] = round(sum(spent[1:]) * 1e6 / events, 2)
            measured["per_instance_cpu_us_per_event"] = [round(x * 1e6 / events, 2)
                                                         for x in spent[1:]]
            measured["standin_cpu_us_per_event"] = round(spent[0] * 1e6 / events, 2)
            rounds.append(measured)
    # the round of median consumer CPU stands for the phase; every round is kept
    by_cpu = sorted(rounds, key=lambda m: m["consumer_cpu_us_per_event"])
    result = {**by_cpu[len(by_cpu) // 2], "instances": instances,
              "rounds_cpu_us_per_event": [m["consumer_cpu_us_per_event"] for m in rounds]}
    console.print(f"[dim]{instances} instance(s): {result}[/]")
    return result


async def bench(bootstrap: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    one = await phase(bootstrap, 1, args, log_dir)
    two = await phase(bootstrap, 2, args, log_dir)
    return {"tokens": args.tokens, "runs": args.runs, "concurrency": args.concurrency,
            "partitions": PARTITIONS, "one": one, "two": two,
            "ratio": round(two["consumer_cpu_us_per_event"]
                           / max(one["consumer_cpu_us_per_event"], 1e-9), 3),
            "load_average": os.getloadavg()}


def report(r: dict[str, Any]) -> None:
    table = Table(title=f"consumer service: CPU per streamed event, runs of {r['tokens']} "
                        f"tokens, {r['concurrency']} at a time ({r['partitions']} partitions)")
    for column in ("instances", "events", "events/s", "errors", "consumer CPU µs/event (sum)",
                   "per instance", "standin µs/event"):
        table.add_column(column, justify="right")
    for doc in (r["one"], r["two"]):
        table.add_row(str(doc["instances"]), f"{doc['events']:,}", f"{doc['events_per_s']:,}",
                      str(doc["errors"]), f"{doc['consumer_cpu_us_per_event']:.2f}",
                      ", ".join(f"{v:.2f}" for v in doc["per_instance_cpu_us_per_event"]),
                      f"{doc['standin_cpu_us_per_event']:.2f}")
    console.print(table)
    console.print(f"2 instances / 1 instance, consumer CPU per streamed event: "
                  f"[bold]{r['ratio']:.2f}x[/] (target ≤ 1.2x; medians of rounds "
                  f"{r['one']['rounds_cpu_us_per_event']} and "
                  f"{r['two']['rounds_cpu_us_per_event']} µs)")
    for name in ("one", "two"):
        if r[name]["errors"]:
            console.print(f"[red]{name} errors:[/] {r[name]['first_errors']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3,
                        help="measured rounds per phase (the median one is reported)")
    with tempfile.TemporaryDirectory(prefix="agui-bench-logs-") as logs, broker() as kafka:
        found = asyncio.run(bench(kafka, parser.parse_args(), Path(logs)))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(found, option=orjson.OPT_INDENT_2))
    report(found)
    console.print(f"[dim]written {RESULTS.relative_to(ROOT)}[/]")


if __name__ == "__main__":
    main()
