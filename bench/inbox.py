"""The interrupt inbox under load: 1,000 open interrupts across 500 threads.

Writes 500 interrupted ThreadStates (two open interrupts each: an approval
gating a tool call and a schema-form question; a quarter already expired)
to a fresh ``threads`` topic, as the gatekeeper would, and each run's
events (the gated ``delete_files`` call streamed between its start and its
end) to ``events``, as a worker would; serves the real consumer app
in-process with one tenant's API key, and measures:

- how long the instance takes, from its start, to have every tool call
  read into its index (the thread view's catch-up, then the loader's one
  read per partition), so the listing carries them;

- ``GET /interrupts`` (the first page, 100 items) and the whole listing
  the page walks (1,000 items, ``limit=500``, two pages), tool calls
  included: p50 / p99 over repeated requests, sequential, on loopback;
- the page's time to interactive in headless Chromium (the system's, via
  Playwright): from navigation start until every one of the 1,000
  interrupts is on the page with its controls, ``performance.now()`` in the
  page, median of five fresh loads.

Prints a table and writes ``bench/results/inbox.json``. Nothing asserts.
Starts a local broker (``bench.broker``) unless ``KAFKA_BOOTSTRAP_SERVERS``
is set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
from ag_ui.core import Interrupt
from rich.console import Console
from rich.table import Table

from bench.broker import broker, topic_prefix
from contracts import OpenInterrupt, ThreadState, encode
from contracts.headers import EventHeaders
from services.consumer.app import create_app
from services.consumer.server import _Server, config
from services.consumer.settings import ConsumerSettings
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_producer
from services.runtime.settings import KafkaSettings

THREADS = 500
PER_THREAD = 2
REQUESTS = 200
LOADS = 5
TOKEN = f"bench-{uuid.uuid4().hex}"
CHROMIUM = os.environ.get("AGUI_CHROMIUM", "/usr/bin/chromium")
RESULTS = Path(__file__).resolve().parent / "results"
APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}},
            "required": ["approved"]}
QUESTION = {"type": "object", "required": ["count"],
            "properties": {"count": {"type": "integer", "minimum": 1},
                           "note": {"type": "string"}}}
console = Console()


def state(n: int, now: datetime) -> ThreadState:
    thread = f"bench-{n:04d}"
    expires = (now - timedelta(minutes=1)) if n % 4 == 0 else (now + timedelta(hours=1))
    interrupts = [
        Interrupt(id=f"approve-{n}", reason="tool_approval", message=f"Delete file {n}?",
                  tool_call_id=f"call-{n}", response_schema=APPROVAL,
                  expires_at=expires.isoformat()),
        Interrupt(id=f"ask-{n}", reason="input", message="How many copies?",
                  response_schema=QUESTION)]
    return ThreadState(thread_id=thread, status="interrupted", agent="approval",
                       principal="bench", run_id=f"run-{n}", interrupted_run_id=f"run-{n}",
                       recent_run_ids=[f"run-{n}"], updated_at=now + timedelta(milliseconds=n),
                       run_started_at=now - timedelta(seconds=1),
                       open_interrupts=[OpenInterrupt(run_id=f"run-{n}", interrupt=i)
                                        for i in interrupts])


def events(n: int) -> list[dict[str, Any]]:
    """The interrupted run's events: the gated tool call between its start and its end."""
    thread, run, call = f"bench-{n:04d}", f"run-{n}", f"call-{n}"
    arguments = orjson.dumps({"paths": [f"/tmp/bench/{n}/report.txt", f"/tmp/bench/{n}/cache"],
                              "recursive": False}).decode()
    return [{"type": "RUN_STARTED", "threadId": thread, "runId": run},
            {"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": "delete_files"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": arguments},
            {"type": "TOOL_CALL_END", "toolCallId": call},
            {"type": "RUN_FINISHED", "threadId": thread, "runId": run,
             "outcome": {"type": "interrupt", "interrupts": [{"id": f"approve-{n}"}]}}]


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
            "n": len(ordered)}


async def until(done: Callable[[], bool], within_s: float = 60.0) -> None:
    async with asyncio.timeout(within_s):
        while not done():  # noqa: ASYNC110 - polling a plain condition
            await asyncio.sleep(0.05)


async def timed(http: httpx.AsyncClient, paths: list[str]) -> float:
    started = time.perf_counter()
    for path in paths:
        response = await http.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        response.raise_for_status()
    return (time.perf_counter() - started) * 1000


async def time_to_interactive(url: str) -> list[float]:
    from playwright.async_api import async_playwright

    out = []
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                    args=["--no-sandbox"])
        try:
            for _ in range(LOADS):
                context = await chromium.new_context(viewport={"width": 1000, "height": 900})
                await context.add_init_script(
                    f"sessionStorage.setItem('agui-relay-api-key', {orjson.dumps(TOKEN).decode()})")
                page = await context.new_page()
                await page.goto(f"{url}/inbox")
                await page.wait_for_function(
                    f"document.querySelectorAll('[data-interrupt-id]').length >= "
                    f"{THREADS * PER_THREAD} && document.querySelectorAll("
                    f"'[data-thread-id] button').length > 0", timeout=120_000, polling=50)
                out.append(float(await page.evaluate("performance.now()")))
                await context.close()
        finally:
            await chromium.close()
    return out


async def measure(bootstrap: str) -> dict[str, Any]:
    kafka = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=bootstrap,
                          AGUI_TOPIC_PREFIX=topic_prefix("benchinbox"))
    await ensure_topics(kafka, ("approval",))
    producer = new_producer(kafka, "bench-inbox")
    await producer.start()
    now = datetime.now(UTC)
    try:
        for n in range(THREADS):
            key = f"bench-{n:04d}".encode()
            for seq, event in enumerate(events(n)):
                await producer.send(kafka.topics.events, orjson.dumps(event), key=key,
                                    headers=EventHeaders(f"run-{n}", event["type"], "approval",
                                                         seq).encode())
            await producer.send(kafka.topics.threads, encode(state(n, now)), key=key)
        await producer.flush()
    finally:
        await producer.stop()
    settings = ConsumerSettings(http_port=0, AGUI_API_KEYS=f"{TOKEN}=bench")
    app = create_app(settings, kafka)
    server = _Server(config(settings, app))
    begun = time.perf_counter()
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done())
        if task.done():
            task.result()
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        url = f"http://{host}:{port}"
        inbox = app.state.interrupts
        await until(lambda: len(inbox.index) >= THREADS * PER_THREAD)
        await until(lambda: inbox.index.tool_calls_held >= THREADS)
        loaded_ms = (time.perf_counter() - begun) * 1000
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await timed(http, ["/interrupts"] * 20)  # warm up
            first = [await timed(http, ["/interrupts"]) for _ in range(REQUESTS)]
            walk = [await timed(http, ["/interrupts?limit=500",
                                       "/interrupts?limit=500&offset=500"])
                    for _ in range(REQUESTS // 2)]
        tti = await time_to_interactive(url)
    finally:
        server.should_exit = True
        await task
    return {"threads": THREADS, "interrupts": THREADS * PER_THREAD,
            "tool_calls_read_ms": round(loaded_ms, 1),
            "first_page_100": quantiles(first), "whole_listing_1000": quantiles(walk),
            "time_to_interactive": {"median_ms": round(statistics.median(tti), 1),
                                    "max_ms": round(max(tti), 1), "n": len(tti)}}


def main() -> None:
    global THREADS, LOADS, REQUESTS  # the defaults, set from the command line
    parser = argparse.ArgumentParser(prog="python -m bench.inbox",
                                     description="The interrupt inbox under load.")
    parser.add_argument("--threads", type=int, default=THREADS,
                        help=f"interrupted threads, two open interrupts each (default {THREADS})")
    parser.add_argument("--loads", type=int, default=LOADS,
                        help=f"fresh page loads timed in Chromium (default {LOADS})")
    parser.add_argument("--requests", type=int, default=REQUESTS,
                        help=f"timed requests of the first page (default {REQUESTS})")
    args = parser.parse_args()
    THREADS, LOADS, REQUESTS = args.threads, args.loads, args.requests
    with broker() as bootstrap:
        result = asyncio.run(measure(bootstrap))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "inbox.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    table = Table(title=f"inbox: {result['interrupts']} open interrupts, "
                        f"{result['threads']} threads")
    for column in ("measure", "p50 / median", "p99 / max", "n"):
        table.add_column(column)
    table.add_row("every tool call read, from the instance's start",
                  f"{result['tool_calls_read_ms']} ms", "", str(result["threads"]))
    for name, key in (("GET /interrupts (100)", "first_page_100"),
                      ("GET /interrupts, all 1,000 (2 pages)", "whole_listing_1000")):
        q = result[key]
        table.add_row(name, f"{q['p50_ms']} ms", f"{q['p99_ms']} ms", str(q["n"]))
    t = result["time_to_interactive"]
    table.add_row("page time to interactive (Chromium)", f"{t['median_ms']} ms",
                  f"{t['max_ms']} ms", str(t["n"]))
    console.print(table)


if __name__ == "__main__":
    main()
