"""Producer benchmark: publishing throughput against raw aiokafka, and 1,000 concurrent runs.

    .venv/bin/python -m bench.producer [--runs 200] [--events 500] [--concurrent 1000]
                                       [--rounds 3]

1. **Throughput**: ``--runs`` runs of an agent streaming ``--events`` text
   deltas each are dispatched first; then one worker (in this process) runs
   them all, and events/s is counted from its first to its last record on
   ``events`` (broker record timestamps). In the same round, a **baseline**
   produces exactly the same records (value bytes, key, headers) with a
   plain producer of the same settings (idempotent, acks=all) to another
   topic, counted the same way. The baseline sends by key, as a plain
   producer does (aiokafka hashes each key: about half its cost per record
   here), while the worker names a run's partition once; and it runs after
   the worker in the same process, so under the collector thresholds the
   worker set for the process. ``--rounds`` rounds; the best of each side
   gives the ratio (target ≥ 0.7), each round's ratio is shown too.
2. **Concurrency**: ``--concurrent`` runs of an agent that awaits 50 ms three
   times (ideal: 150 ms when all run at once) are dispatched first; one
   worker allowed that many runs at once runs them, and the makespan is
   from the first RUN_STARTED to the last RUN_FINISHED (target: within 2x
   the ideal). ``--rounds`` rounds too, each on fresh topics with a fresh
   worker, as this machine is shared: the best round is the figure (as for
   throughput), every round's is shown with the median. Per-run durations
   (of the best round) are reported too, and the worker's CPU per run: the
   process's CPU time (user + system) while the worker served the round,
   over the runs — a figure the other processes sharing the machine move
   far less than the makespan (it includes the worker's start-up and group
   join, a fixed ~0.1 s over the round). In every round a **plain
   baseline** serves the same 1,000 dispatches with no runtime at all: plain
   aiokafka, one task per record that writes the same five events (with
   the same headers) around the same three naps, no validation, no
   checkpoint, no bookkeeping, offsets committed once at the end. Its
   makespan is what this machine allows any Python worker; the worker's is
   also shown as a ratio to it.

Everything runs on uvloop, the event loop ``agui-relay producer`` runs its worker
on (``services.runtime.lifecycle``): the worker is measured as deployed, and the
raw baseline on the same loop.

Starts a local broker through the launcher when ``KAFKA_BOOTSTRAP_SERVERS``
is unset. Prints a table and writes ``bench/results/producer.json``.
Benchmarks print; they assert nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import uvloop
from ag_ui.core import RunAgentInput, UserMessage
from rich.console import Console
from rich.table import Table

from bench.broker import broker, topic_prefix
from contracts import Dispatch, EventHeaders, encode
from services.kafka.admin import ensure_topics
from services.kafka.clients import ConsumerRecord, new_consumer, new_producer
from services.kafka.reader import TopicReader
from services.producer.agent import AgentDefinition, agent_definition
from services.producer.context import RunContext
from services.producer.settings import ProducerSettings
from services.producer.worker import Worker
from services.runtime.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "producer.json"
PARTITIONS = 8
NAP_S = 0.05
NAPS = 3
console = Console()


async def streamer(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Streams ``forwardedProps.events`` small text deltas as one message."""
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    count = int(props.get("events", 0))
    message = await ctx.start_message()
    for i in range(count):
        await message.write(f"token {i} ")
    await message.end()


async def napper(run_input: RunAgentInput, ctx: RunContext) -> None:
    """Awaits 50 ms three times (an agent waiting on a model), then says so."""
    for _ in range(NAPS):
        await asyncio.sleep(NAP_S)
    await ctx.text("rested")


AGENTS: dict[str, AgentDefinition] = {
    "stream": agent_definition(streamer),
    "nap": agent_definition(napper),
}


async def preload(settings: KafkaSettings, agent: str, runs: int, props: dict[str, Any]) -> None:
    """Write ``runs`` dispatches (one thread each) before any worker runs."""
    producer = new_producer(settings, "bench-preload", linger_ms=5)
    await producer.start()
    try:
        now = datetime.now(UTC)
        futures = []
        for i in range(runs):
            run_input = RunAgentInput(
                thread_id=f"{agent}-thread-{i}", run_id=f"{agent}-run-{i}",
                messages=[UserMessage(id=f"u-{i}", content="go")], forwarded_props=props)
            record = Dispatch(request_id=f"req-{agent}-{i}", agent=agent, input=run_input,
                              submitted_at=now, decided_at=now)
            futures.append(await producer.send(settings.topics.dispatch(agent), encode(record),
                                               key=run_input.thread_id.encode()))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def serve_until(settings: KafkaSettings, agent: str, expected: int,
                      max_runs: int, limit_s: float) -> float:
    """Run a worker hosting ``agent`` until ``events`` holds ``expected`` records."""
    producer_settings = ProducerSettings.model_validate(
        {"AGUI_AGENTS": agent, "AGUI_MAX_CONCURRENT_RUNS": max_runs, "AGUI_LOG_FORMAT": "text"})
    worker = Worker(settings, producer_settings, {agent: AGENTS[agent]})
    stop = asyncio.Event()
    began = time.perf_counter()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with TopicReader(settings, "bench-counter") as reader:
            partitions = await reader.all_partitions(settings.topics.events)
            while sum((await reader.end_offsets(partitions)).values()) < expected:
                if task.done():
                    task.result()
                if time.perf_counter() - began > limit_s:
                    raise TimeoutError(f"the worker did not finish {agent} in {limit_s:.0f} s")
                await asyncio.sleep(0.25)
        return time.perf_counter() - began
    finally:
        stop.set()
        await task


async def read_events(settings: KafkaSettings, topic: str) -> list[ConsumerRecord[Any, Any]]:
    async with TopicReader(settings, "bench-reader") as reader:
        return await reader.read_all(await reader.all_partitions(topic))


def span_s(records: list[ConsumerRecord[Any, Any]]) -> float:
    stamps: list[int] = [r.timestamp for r in records]
    return max((max(stamps) - min(stamps)) / 1000, 0.001)


async def raw_baseline(settings: KafkaSettings, records: list[ConsumerRecord[Any, Any]],
                       topic: str) -> list[ConsumerRecord[Any, Any]]:
    """Produce the same bytes with a plain producer (same settings); read them back."""
    producer = new_producer(settings, "bench-raw", linger_ms=ProducerSettings().linger_ms)
    await producer.start()
    try:
        futures = [await producer.send(topic, r.value, key=r.key, headers=list(r.headers))
                   for r in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return await read_events(settings, topic)


async def throughput_round(bootstrap: str, prefix: str, runs: int,
                           events: int) -> dict[str, Any]:
    """One round: the worker publishes, then raw aiokafka sends the same records."""
    settings = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix,
                             partitions=PARTITIONS)
    raw = settings.with_prefix(prefix + "raw")
    await ensure_topics(settings, ("stream",))
    await ensure_topics(raw, ())
    await preload(settings, "stream", runs, {"events": events})
    expected = runs * (events + 4)  # RUN_STARTED, START, deltas, END, RUN_FINISHED
    await serve_until(settings, "stream", expected, max_runs=256, limit_s=60)
    published = await read_events(settings, settings.topics.events)
    published.sort(key=lambda r: r.timestamp)
    baseline = await raw_baseline(settings, published, raw.topics.events)
    return {"events": len(published), "worker": len(published) / span_s(published),
            "raw": len(baseline) / span_s(baseline),
            "bytes_per_event": sum(len(r.value) for r in published) / len(published)}


async def throughput(bootstrap: str, prefix: str, runs: int, events: int,
                     rounds: int) -> dict[str, Any]:
    """Best of ``rounds`` for each side (this machine is shared, so single runs are noisy)."""
    done = []
    for i in range(rounds):
        done.append(await throughput_round(bootstrap, f"{prefix}{i}", runs, events))
        console.print(f"[dim]round {i + 1}: worker {done[-1]['worker']:,.0f}/s, "
                      f"raw {done[-1]['raw']:,.0f}/s[/]")
    worker, raw = max(d["worker"] for d in done), max(d["raw"] for d in done)
    return {"runs": runs, "events_per_run": events, "rounds": done,
            "worker_per_second": worker, "raw_per_second": raw, "ratio": worker / raw,
            "round_ratios": [d["worker"] / d["raw"] for d in done],
            "median_round_ratio": statistics.median(d["worker"] / d["raw"] for d in done),
            "bytes_per_event": done[0]["bytes_per_event"]}


def process_cpu_s() -> float:
    """CPU time this process has used (user + system), in seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def concurrency_round(bootstrap: str, prefix: str, runs: int) -> dict[str, Any]:
    settings = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix,
                             partitions=PARTITIONS)
    await ensure_topics(settings, ("nap",))
    await preload(settings, "nap", runs, {})
    expected = runs * 5  # RUN_STARTED, START, CONTENT, END, RUN_FINISHED
    cpu_before = process_cpu_s()
    await serve_until(settings, "nap", expected, max_runs=runs, limit_s=120)
    cpu_per_run = (process_cpu_s() - cpu_before) / runs
    return {**await timeline(settings, runs), "cpu_per_run_s": cpu_per_run}


async def plain_round(bootstrap: str, prefix: str, runs: int) -> dict[str, Any]:
    """The same round served by ``plain_worker``: the makespan with no runtime at all."""
    settings = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix,
                             partitions=PARTITIONS)
    await ensure_topics(settings, ("nap",))
    await preload(settings, "nap", runs, {})
    cpu_before = process_cpu_s()
    await asyncio.wait_for(plain_worker(settings, "nap", runs), 120)
    cpu_per_run = (process_cpu_s() - cpu_before) / runs
    return {**await timeline(settings, runs), "cpu_per_run_s": cpu_per_run}


async def plain_worker(settings: KafkaSettings, agent: str, runs: int) -> None:
    """Serve ``runs`` dispatches of the napper with plain aiokafka and no runtime.

    One task per dispatch record writes RUN_STARTED, naps three times,
    writes the text message's three events and RUN_FINISHED, each with the
    worker's five headers, on the thread's partition (by key); the producer
    is the worker's (idempotent, acks=all, the same linger). Nothing is
    validated or checkpointed, and the offsets are committed once, at the end.
    """
    consumer = new_consumer(settings, "bench-plain", settings.topics.dispatch(agent),
                            group_id=f"{settings.topic_prefix}.plain")
    producer = new_producer(settings, "bench-plain", linger_ms=ProducerSettings().linger_ms)
    topic, finished, tasks = settings.topics.events, 0, set()

    async def serve(record: ConsumerRecord[Any, Any]) -> None:
        nonlocal finished
        run_input = orjson.loads(record.value)["input"]
        thread_id, run_id, seq = run_input["threadId"], run_input["runId"], 0

        async def emit(event: dict[str, Any]) -> asyncio.Future[Any]:
            nonlocal seq
            seq += 1
            headers = EventHeaders(run_id=run_id, event_type=event["type"], agent=agent, seq=seq)
            event["timestamp"] = int(time.time() * 1000)
            sent: asyncio.Future[Any] = await producer.send(
                topic, orjson.dumps(event), key=record.key, headers=headers.encode())
            return sent

        await emit({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id,
                    "input": run_input})
        for _ in range(NAPS):
            await asyncio.sleep(NAP_S)
        message = {"messageId": f"{run_id}-m"}
        await asyncio.gather(
            await emit({"type": "TEXT_MESSAGE_START", **message, "role": "assistant"}),
            await emit({"type": "TEXT_MESSAGE_CONTENT", **message, "delta": "rested"}),
            await emit({"type": "TEXT_MESSAGE_END", **message}),
            await emit({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id}))
        finished += 1

    await consumer.start()
    await producer.start()
    try:
        while finished < runs:
            for records in (await consumer.getmany(timeout_ms=50)).values():
                for record in records:
                    task = asyncio.create_task(serve(record))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


async def timeline(settings: KafkaSettings, runs: int) -> dict[str, Any]:
    """Makespan (first RUN_STARTED to last end, broker timestamps) and per-run durations."""
    records = await read_events(settings, settings.topics.events)
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    for record in records:
        headers = EventHeaders.decode(record.headers)
        assert headers is not None
        if headers.event_type == "RUN_STARTED":
            starts[headers.run_id] = record.timestamp
        elif headers.event_type in ("RUN_FINISHED", "RUN_ERROR"):
            ends[headers.run_id] = record.timestamp
    makespan = (max(ends.values()) - min(starts.values())) / 1000
    durations = sorted((ends[r] - starts[r]) / 1000 for r in ends)
    ideal = NAP_S * NAPS
    return {"runs": runs, "finished": len(ends), "ideal_s": ideal, "makespan_s": makespan,
            "makespan_over_ideal": makespan / ideal,
            "run_p50_s": statistics.median(durations),
            "run_p99_s": durations[int(0.99 * (len(durations) - 1))]}


async def concurrency(bootstrap: str, prefix: str, runs: int, rounds: int) -> dict[str, Any]:
    """The best of ``rounds`` rounds (the shared machine makes single rounds noisy)."""
    done, plain = [], []
    for i in range(rounds):  # alternating which side goes first
        sides = [("worker", concurrency_round, done), ("plain", plain_round, plain)]
        for name, serve, into in sides if i % 2 == 0 else sides[::-1]:
            into.append(await serve(bootstrap, f"{prefix}{name[0]}{i}", runs))
            console.print(f"[dim]round {i + 1}, {name}: makespan "
                          f"{into[-1]['makespan_s'] * 1000:,.0f} ms "
                          f"({into[-1]['makespan_over_ideal']:.2f} x ideal), CPU "
                          f"{into[-1]['cpu_per_run_s'] * 1e6:,.0f} µs per run[/]")
    best = min(done, key=lambda d: d["makespan_s"])
    best_plain = min(plain, key=lambda d: d["makespan_s"])
    ratios = [d["makespan_over_ideal"] for d in done]
    cpu = [d["cpu_per_run_s"] for d in done]
    return {**best, "round_makespans_over_ideal": ratios,
            "median_makespan_over_ideal": statistics.median(ratios),
            "round_cpu_per_run_s": cpu, "median_cpu_per_run_s": statistics.median(cpu),
            "plain": {**best_plain,
                      "round_makespans_over_ideal": [d["makespan_over_ideal"] for d in plain],
                      "round_cpu_per_run_s": [d["cpu_per_run_s"] for d in plain]},
            "makespan_over_plain": best["makespan_s"] / best_plain["makespan_s"]}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with broker() as bootstrap:
        prefix = topic_prefix("pbench")
        console.print(f"[dim]broker {bootstrap}, topics {prefix}*.[/]")
        speed = await throughput(bootstrap, prefix + "t", args.runs, args.events, args.rounds)
        results: dict[str, Any] = {"partitions": PARTITIONS, "throughput": speed}
        results["concurrency"] = await concurrency(bootstrap, prefix + "c", args.concurrent,
                                                   args.rounds)
    return results


def report(r: dict[str, Any]) -> None:
    t, c = r["throughput"], r["concurrency"]
    table = Table(title=f"producer benchmark ({r['partitions']} partitions)")
    for column in ("measure", "value", "target"):
        table.add_column(column)
    table.add_row(f"worker, events/s ({t['runs']} runs x {t['events_per_run']} deltas)",
                  f"{t['worker_per_second']:,.0f}", "")
    table.add_row("raw aiokafka, same records, events/s", f"{t['raw_per_second']:,.0f}", "")
    table.add_row("ratio worker / raw (best of each)", f"{t['ratio']:.2f}", "≥ 0.7")
    table.add_row("ratio per round (median)", " ".join(f"{x:.2f}" for x in t["round_ratios"])
                  + f" ({t['median_round_ratio']:.2f})", "")
    table.add_row("bytes per event", f"{t['bytes_per_event']:.0f}", "")
    table.add_row(f"{c['runs']} concurrent runs (3 x 50 ms awaits): makespan",
                  f"{c['makespan_s'] * 1000:,.0f} ms", f"≤ {2 * c['ideal_s'] * 1000:.0f} ms")
    table.add_row("makespan / ideal (best round)", f"{c['makespan_over_ideal']:.2f}", "≤ 2")
    table.add_row("makespan / ideal per round (median)",
                  " ".join(f"{x:.2f}" for x in c["round_makespans_over_ideal"])
                  + f" ({c['median_makespan_over_ideal']:.2f})", "")
    table.add_row("worker CPU per run, per round (median)",
                  " ".join(f"{x * 1e6:,.0f}" for x in c["round_cpu_per_run_s"])
                  + f" ({c['median_cpu_per_run_s'] * 1e6:,.0f}) µs", "")
    plain = c["plain"]
    table.add_row("plain aiokafka worker, no runtime: makespan / ideal (best round)",
                  f"{plain['makespan_over_ideal']:.2f}", "")
    table.add_row("plain, per round; its CPU per run (median)",
                  " ".join(f"{x:.2f}" for x in plain["round_makespans_over_ideal"])
                  + f"; {statistics.median(plain['round_cpu_per_run_s']) * 1e6:,.0f} µs", "")
    table.add_row("worker makespan / plain makespan (best of each)",
                  f"{c['makespan_over_plain']:.2f}", "")
    table.add_row("one run, RUN_STARTED to its end, p50 / p99",
                  f"{c['run_p50_s'] * 1000:.0f} / {c['run_p99_s'] * 1000:.0f} ms",
                  f"≤ {2 * c['ideal_s'] * 1000:.0f} ms")
    console.print(table)


def cli() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        results = runner.run(main(parser.parse_args()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    report(results)
    console.print(f"[dim]written to {RESULTS.relative_to(ROOT)}[/]")


if __name__ == "__main__":
    cli()
