"""The gatekeeper's CPU per streamed token: it reads run boundaries, not tokens.

    .venv/bin/python -m bench.gatekeeper_streaming [--runs 200] [--tokens 500] [--lanes 20]
                                                   [--batch-ms 200]

The gatekeeper runs as its own process (``python -m services.gatekeeper``,
8 partitions) beside a producer worker in this process hosting an agent that
streams ``--tokens`` ``TEXT_MESSAGE_CONTENT`` events per run (``bench.producer``'s
``streamer``). ``--lanes`` clients each submit a run on a new thread, wait
for its end (read on ``runs``), and submit the next: ``--runs`` runs in all.
The gatekeeper's CPU time (user + system, from ``/proc``) is read just before
the first request and once the gatekeeper's group has committed all of
``runs`` (every boundary applied, its thread state written); divided
by the content events streamed meanwhile, it is the CPU the gatekeeper spends
per token (target ≤ 1 µs; it read every token of ``events`` before the
boundary topic, 9-23 µs). That figure is the gatekeeper's whole CPU — its
decisions and the transactions recording each run's end, and what it spends
idle for as long (polls, heartbeats; measured over ``IDLE_S`` before the
load) — spread over the tokens. The same runs with one token each (fresh
topics, a fresh gatekeeper) show what a token itself costs: the difference
of busy CPU per run, per extra token. The **floor**, between the two: the
same runs of ``--tokens`` (fresh topics, the same worker and clients) with
``bench.gatekeeper_streaming_floor`` in the gatekeeper's place, plain
aiokafka doing only the Kafka work the gatekeeper must do per run (a
transaction writing the decision and dispatch, committing the request; one
writing the thread state at the run's end, committing ``runs``), its CPU
measured the same way: the table puts the two side by side with the ratio.
Then both again batching (``AGUI_GATEKEEPER_BATCH_MS`` ``--batch-ms``, which the
floor honours too: its fetches wait to fill alike, one transaction a poll), with
each run's wait from its request to its ``RUN_STARTED`` on ``runs`` beside the
CPU: what batching saves, and what it costs a run's start at this load.
Also run as a phase of ``bench.gatekeeper``; writes
``bench/results/gatekeeper_streaming.json`` when run alone. Benchmarks print;
they assert nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import uvloop
from ag_ui.core import RunAgentInput, UserMessage
from rich.console import Console
from rich.table import Table

from bench.broker import broker, topic_prefix
from bench.consumer import cpu_seconds
from bench.gatekeeper_requests import PARTITIONS, ROOT
from bench.producer import AGENTS
from contracts import RunRequest, encode
from contracts.headers import EVENT_TYPE, RUN_ID, header_value
from contracts.topics import TERMINAL_TYPES
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_admin, new_producer
from services.kafka.reader import Start, TopicReader
from services.producer.settings import ProducerSettings
from services.producer.worker import Worker
from services.runtime.settings import KafkaSettings

RESULTS = ROOT / "bench" / "results" / "gatekeeper_streaming.json"
AGENT = "stream"
IDLE_S = 3.0
BATCH_MS = 200
"""``AGUI_GATEKEEPER_BATCH_MS`` of the batched phases."""
console = Console(width=120)


def run_request(thread_id: str, run_id: str, tokens: int) -> RunRequest:
    return RunRequest(
        request_id=f"q-{run_id}", agent=AGENT, submitted_at=datetime.now(UTC),
        input=RunAgentInput(thread_id=thread_id, run_id=run_id, state={}, tools=[], context=[],
                            forwarded_props={"events": tokens},
                            messages=[UserMessage(id=f"m-{run_id}", content="go")]))


@contextlib.asynccontextmanager
async def child_process(settings: KafkaSettings, module: str, extra_env: dict[str, str],
                        stdout: int) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m module`` on ``settings``' topics; terminated on the way out."""
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
           "AGUI_TOPIC_PREFIX": settings.topic_prefix, "AGUI_PARTITIONS": str(PARTITIONS),
           **extra_env}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, cwd=ROOT, env=env,
        stdout=stdout, stderr=asyncio.subprocess.DEVNULL)
    try:
        yield child
    finally:
        if child.returncode is None:
            child.terminate()
            await child.wait()


@contextlib.asynccontextmanager
async def gatekeeper(settings: KafkaSettings, extra_env: dict[str, str]) -> AsyncIterator[int]:
    """``python -m services.gatekeeper`` on ``settings``' topics, once ready; yields its pid."""
    port = launcher.free_port()
    env = {"AGUI_LOG_FORMAT": "json", "AGUI_LOG_LEVEL": "WARNING",
           "AGUI_HEALTH_HOST": "127.0.0.1", "AGUI_HEALTH_PORT": str(port), **extra_env}
    async with child_process(settings, "services.gatekeeper", env,
                             asyncio.subprocess.DEVNULL) as child:
        async with httpx.AsyncClient(timeout=2.0) as http, asyncio.timeout(90):
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        break
                if child.returncode is not None:
                    raise RuntimeError(f"the gatekeeper exited {child.returncode}")
                await asyncio.sleep(0.2)
        yield child.pid


@contextlib.asynccontextmanager
async def floor(settings: KafkaSettings, extra_env: dict[str, str]) -> AsyncIterator[int]:
    """``python -m bench.gatekeeper_streaming_floor`` in the gatekeeper's place, once its
    partitions are assigned; yields its pid."""
    async with child_process(settings, "bench.gatekeeper_streaming_floor", extra_env,
                             asyncio.subprocess.PIPE) as child:
        assert child.stdout is not None
        async with asyncio.timeout(90):
            line = await child.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the floor process exited {await child.wait()}")
        yield child.pid


Server = Callable[[KafkaSettings, dict[str, str]], contextlib.AbstractAsyncContextManager[int]]


class Ends:
    """Follows ``runs``: notes when each run started and resolves its future at its end."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.waiting: dict[str, asyncio.Future[None]] = {}
        self.started: dict[str, float] = {}
        """runId → when its RUN_STARTED was read (``time.perf_counter``)."""
        self.ready = asyncio.Event()

    async def follow(self, stop: asyncio.Event) -> None:
        async with TopicReader(self.settings, "bench-ends") as reader:
            await reader.assign(await reader.all_partitions(self.settings.topics.runs),
                                Start.end())
            self.ready.set()
            async for batch in reader.batches(stop=stop, poll_ms=50):
                for record in batch:
                    event_type = header_value(record.headers, EVENT_TYPE)
                    if event_type == "RUN_STARTED":
                        self.started[header_value(record.headers, RUN_ID) or ""] = (
                            time.perf_counter())
                    elif event_type in TERMINAL_TYPES:
                        future = self.waiting.pop(header_value(record.headers, RUN_ID) or "",
                                                  None)
                        if future is not None and not future.done():
                            future.set_result(None)


async def committed_all(settings: KafkaSettings) -> bool:
    """True once the gatekeeper's group has committed every record of ``runs``: every
    boundary applied and its thread state written."""
    admin = new_admin(settings, "bench-offsets")
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(f"{settings.topic_prefix}.gatekeeper")
    finally:
        await admin.close()
    async with TopicReader(settings, "bench-ends-now") as reader:
        ends = await reader.end_offsets(await reader.all_partitions(settings.topics.runs))
    return all(committed.get(tp) is not None and committed[tp].offset >= end
               for tp, end in ends.items() if end > 0)


async def streaming(settings: KafkaSettings, runs: int, tokens: int, lanes: int,
                    server: Server = gatekeeper, batch_ms: int = 0) -> dict[str, Any]:
    """The phase: ``runs`` runs of ``tokens`` tokens, ``lanes`` at a time, decided by
    ``server`` (the gatekeeper, or the floor in its place; ``AGUI_GATEKEEPER_BATCH_MS``
    ``batch_ms``); its CPU per token, and each run's wait from request to start."""
    await ensure_topics(settings, (AGENT,))
    producer_settings = ProducerSettings.model_validate(
        {"AGUI_AGENTS": AGENT, "AGUI_MAX_CONCURRENT_RUNS": lanes, "AGUI_LOG_FORMAT": "text"})
    worker = Worker(settings, producer_settings, {AGENT: AGENTS[AGENT]})
    stop = asyncio.Event()
    ends = Ends(settings)
    tag = uuid.uuid4().hex[:6]
    async with server(settings, {"AGUI_GATEKEEPER_BATCH_MS": str(batch_ms)}) as pid:
        serving = asyncio.create_task(worker.run(stop))
        following = asyncio.create_task(ends.follow(stop))
        client = new_producer(settings, "bench-client", linger_ms=1)
        await client.start()
        try:
            await ends.ready.wait()
            while not worker.ready:
                if serving.done():
                    serving.result()
                await asyncio.sleep(0.1)

            async def lane(numbers: Iterator[int], waits: list[float]) -> None:
                for n in numbers:
                    thread_id, run_id = f"t{tag}-{n}", f"r{tag}-{n}"
                    done = ends.waiting[run_id] = asyncio.get_running_loop().create_future()
                    sent = time.perf_counter()
                    await client.send_and_wait(settings.topics.requests,
                                               encode(run_request(thread_id, run_id, tokens)),
                                               key=thread_id.encode())
                    await asyncio.wait_for(done, 120)
                    waits.append(ends.started.pop(run_id, float("nan")) - sent)

            # warm-up, unmeasured: one run per lane (the gatekeeper's producer has written
            # to every partition, the worker has its partitions)
            warm = iter(range(runs, runs + lanes))
            await asyncio.gather(*(lane(warm, []) for _ in range(lanes)))
            idle_before = cpu_seconds(pid)
            await asyncio.sleep(IDLE_S)
            idle = cpu_seconds(pid) - idle_before
            before, started = cpu_seconds(pid), time.perf_counter()
            numbers, waits = iter(range(runs)), list[float]()
            await asyncio.gather(*(lane(numbers, waits) for _ in range(lanes)))
            while not await committed_all(settings):  # noqa: ASYNC110 (Kafka has no event)
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(pid) - before
        finally:
            stop.set()
            await client.stop()
            await asyncio.gather(serving, following, return_exceptions=True)
    content = runs * tokens
    idle_share = idle / IDLE_S * elapsed
    waits_ms = sorted(w * 1000 for w in waits if w == w) or [float("nan")]  # NaN: no start
    return {
        "process": server.__name__, "runs": runs, "tokens_per_run": tokens, "lanes": lanes,
        "batch_ms": batch_ms,
        "start_wait_ms": {"p50": waits_ms[len(waits_ms) // 2],
                          "p99": waits_ms[min(len(waits_ms) - 1, len(waits_ms) * 99 // 100)]},
        "content_events": content, "seconds": elapsed,
        "content_events_per_second": content / elapsed,
        "gatekeeper_cpu_s": cpu,  # the process deciding: the gatekeeper or the floor
        "cpu_us_per_content_event": cpu * 1e6 / content,
        "cpu_us_per_run": cpu * 1e6 / runs,
        "idle_cpu_s_same_duration": idle_share,
        "idle_cpu_us_per_run": idle_share * 1e6 / runs,
        "idle_share_of_cpu": idle_share / cpu if cpu else float("nan"),
        "busy_cpu_us_per_run": (cpu - idle_share) * 1e6 / runs,
    }


async def compare(settings: KafkaSettings, runs: int, tokens: int, lanes: int,
                  batch_ms: int = BATCH_MS) -> dict[str, Any]:
    """``streaming`` with runs of ``tokens`` tokens, the same with the floor in the
    gatekeeper's place, both again batching (``AGUI_GATEKEEPER_BATCH_MS``), then runs of
    one token (fresh topics and process each): the gatekeeper against the Kafka work it
    cannot avoid, what batching buys and costs, and what a token costs it."""
    def phase(tag: str, server: Server = gatekeeper, **kw: Any) -> Any:
        return streaming(settings.with_prefix(settings.topic_prefix + tag), runs,
                         kw.pop("tokens", tokens), lanes, server, **kw)

    long = await phase("t")
    plain = await phase("f", floor)
    batched = await phase("b", batch_ms=batch_ms)
    batched_floor = await phase("g", floor, batch_ms=batch_ms)
    short = await phase("o", tokens=1)
    marginal = (long["busy_cpu_us_per_run"] - short["busy_cpu_us_per_run"]) / (tokens - 1)

    def ratios(x: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
        return {"ratio_to_floor": x["cpu_us_per_content_event"]
                / base["cpu_us_per_content_event"],
                "busy_ratio_to_floor": x["busy_cpu_us_per_run"] / base["busy_cpu_us_per_run"]}

    return {**long, "one_token": short, "marginal_cpu_us_per_content_event": marginal,
            "floor": plain, **ratios(long, plain),
            "batched": {**batched, "floor": batched_floor, **ratios(batched, batched_floor),
                        "ratio_to_unbatched_floor": batched["cpu_us_per_content_event"]
                        / plain["cpu_us_per_content_event"]}}


def table(r: dict[str, Any]) -> Table:
    """The gatekeeper's figures next to the floor's, batching and not, and the one-token
    runs."""
    short, plain, batched = r["one_token"], r["floor"], r["batched"]
    out = Table(title=f"CPU while {r['runs']} runs of {r['tokens_per_run']} tokens stream, "
                      f"{r['lanes']} at a time (target ≤ 1 µs per content event)")
    for column in ("process", "µs/event", "µs/run", "idle µs/run", "busy µs/run", "events/s",
                   "start wait p50 / p99 ms"):
        out.add_column(column)

    def row(name: str, x: dict[str, Any], per_event: str) -> None:
        wait = x["start_wait_ms"]
        out.add_row(name, per_event, f"{x['cpu_us_per_run']:,.0f}",
                    f"{x['idle_cpu_us_per_run']:,.0f} ({x['idle_share_of_cpu']:.0%})",
                    f"{x['busy_cpu_us_per_run']:,.0f}", f"{x['content_events_per_second']:,.0f}",
                    f"{wait['p50']:.0f} / {wait['p99']:.0f}")

    def ratio(name: str, x: dict[str, Any]) -> None:
        out.add_row(name, f"{x['ratio_to_floor']:.2f}", "", "", f"{x['busy_ratio_to_floor']:.2f}",
                    "", "")

    row("gatekeeper", r, f"{r['cpu_us_per_content_event']:.2f}")
    row("floor (plain aiokafka)", plain, f"{plain['cpu_us_per_content_event']:.2f}")
    ratio("gatekeeper / floor", r)
    suffix = f", BATCH_MS={batched['batch_ms']}"
    row("gatekeeper" + suffix, batched, f"{batched['cpu_us_per_content_event']:.2f}")
    row("floor" + suffix, batched["floor"], f"{batched['floor']['cpu_us_per_content_event']:.2f}")
    ratio("batched gatekeeper / batched floor", batched)
    out.add_row("batched gatekeeper / floor", f"{batched['ratio_to_unbatched_floor']:.2f}",
                "", "", "", "", "")
    row("gatekeeper, 1-token runs", short, "")
    out.add_row("a token's cost at the margin",
                f"{r['marginal_cpu_us_per_content_event']:.2f}", "", "", "", "", "")
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with broker() as bootstrap:
        settings = KafkaSettings(bootstrap_servers=bootstrap, partitions=PARTITIONS,
                                 topic_prefix=topic_prefix("benchs"))
        return await compare(settings, args.runs, args.tokens, args.lanes, args.batch_ms)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--lanes", type=int, default=20)
    parser.add_argument("--batch-ms", type=int, default=BATCH_MS,
                        help="AGUI_GATEKEEPER_BATCH_MS of the batched phases")
    results = uvloop.run(main(parser.parse_args()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    console.print(table(results))
    console.print(f"[dim]written to {RESULTS.relative_to(ROOT)}[/]")


if __name__ == "__main__":
    cli()
