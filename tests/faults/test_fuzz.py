"""10,000 malformed, oversized, wrongly typed and adversarial requests, over HTTP and Kafka.

Hypothesis draws the cases (``faults.fuzzcases``): half go through the
consumer service's ``POST /agents/{agent}``, half straight onto
``requests``, while ordinary interrupt → resume flows keep running beside
them. Some cases aim at threads left interrupted with a non-date, a past
and a future ``expiresAt``, so resume rules are exercised with enormous,
duplicated and unknown entry lists. Every case must end clearly:

- over HTTP, a 4xx ``application/problem+json`` with a ``code``, or a 200
  stream that ends with a terminal event — never a 5xx or a dropped
  connection;
- on Kafka, a decision or a dead letter for every record (the checker),
  including a burst of requests on different threads that share one
  requestId (each its own decision and dispatch);

and the services keep serving the valid flows, with resident memory that
does not grow with the number of cases (sampled from /proc before and after).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import RunAgentInput
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from contracts import RunRequest, encode
from faults.follower import Follower
from faults.fuzzcases import (
    COMMON,
    HTTP_ONLY,
    KAFKA_ONLY,
    Case,
    Targets,
    case_strategy,
    http_request,
    kafka_record,
)
from faults.harness import Stack, StackConfig, growth_mib, unique_prefix
from faults.load import HttpRun, KafkaLoad, pool_limits, post_run, run_input
from faults.scenario import verify
from services.kafka.clients import new_producer
from services.kafka.sizing import record_size

pytestmark = pytest.mark.faults

CASES = int(os.environ.get("AGUI_FUZZ_CASES", "10000"))
RECORD_LIMIT = 65_536
BODY_LIMIT = 1_048_576
BATCH = 25
RSS_GROWTH_LIMIT_MIB = 200.0
"""Generous: a leak proportional to the cases (some a megabyte) would far exceed it."""
INTERRUPTS = [
    {"id": "a", "reason": "input_required", "expiresAt": "not a date"},
    {"id": "b", "reason": "input_required", "expiresAt": "2001-01-01T00:00:00Z"},
    {"id": "c", "reason": "input_required", "expiresAt": "2999-01-01T00:00:00.000Z"},
    {"id": "d", "reason": "input_required"},
]


def draw_cases(targets: Targets, kinds: list[str], n: int, salt: int) -> list[Case]:
    """``n`` cases from Hypothesis, drawn in batches (generation only: nothing to shrink)."""
    out: list[Case] = []

    @seed(20250101 + salt)
    @settings(max_examples=max(n // BATCH, 1), phases=[Phase.generate], database=None,
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(case_strategy(targets, kinds), min_size=BATCH, max_size=BATCH))
    def collect(batch: list[Case]) -> None:
        out.extend(batch)

    collect()
    return out[:n]


def judge_http(result: HttpRun) -> str | None:
    """Why an HTTP answer is not a clear one (None: it is)."""
    if result.error is not None and result.status == 0:
        return f"transport: {result.error}"
    if 400 <= result.status < 500:
        if not result.content_type.startswith("application/problem+json"):
            return f"{result.status} with content type {result.content_type!r}"
        if not isinstance((result.problem or {}).get("code"), str):
            return f"{result.status} problem without a code: {result.problem}"
        return None
    if result.status == 200:
        return None if result.ending is not None else f"200 stream without a terminal event " \
                                                      f"({len(result.events)} events)"
    return f"status {result.status}: {result.problem}"


async def interrupted_threads(load: KafkaLoad, n: int) -> list[str]:
    """``n`` threads left interrupted on the four interrupts of ``INTERRUPTS``."""
    async def one(i: int) -> str | None:
        thread_id, run_id = f"fz-target-{i}-{time.time_ns()}", f"run-target-{i}"
        wire = run_input(thread_id, run_id, script={"interrupts": INTERRUPTS})
        _, ending = await load.step("scripted", wire)
        return thread_id if ending is not None and ending.interrupt_ids else None

    found = await asyncio.gather(*(one(i) for i in range(n)))
    return [t for t in found if t is not None]


async def push_http(url: str, cases: list[Case], targets: Targets,
                    concurrency: int = 48) -> tuple[Counter[str], list[str]]:
    outcomes: Counter[str] = Counter()
    unclear: list[str] = []
    history: list[dict[str, Any]] = []
    queue: asyncio.Queue[Case] = asyncio.Queue()
    for case in cases:
        queue.put_nowait(case)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0),
                                 limits=pool_limits(concurrency)) as client:

        async def worker() -> None:
            while not queue.empty():
                case = queue.get_nowait()
                agent, body = http_request(case, targets, history)
                result = await post_run(client, url, agent, body)
                code = (result.problem or {}).get("code") if result.problem else None
                outcomes[f"{result.status}:{code or 'stream'}"] += 1
                why = judge_http(result)
                if why is not None:
                    unclear.append(f"{case.kind} #{case.n}: {why}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes, unclear


def shared_request_id_burst(n: int = 16) -> list[tuple[bytes, bytes]]:
    """``n`` valid requests on ``n`` fresh threads that all carry one requestId.

    A requestId is remembered per thread, so these are ``n`` independent
    requests: each thread must get its own decision and its own dispatch.
    Sent back to back, several land in one partition's batch.
    """
    shared = f"shared-{uuid.uuid4().hex[:6]}"
    out = []
    for i in range(n):
        thread_id = f"fz-shared-{i}-{uuid.uuid4().hex[:6]}"
        request = RunRequest(request_id=shared, agent="scripted", submitted_at=datetime.now(UTC),
                             input=RunAgentInput.model_validate(
                                 run_input(thread_id, f"run-shared-{i}")))
        out.append((thread_id.encode(), encode(request)))
    return out


async def push_kafka(stack: Stack, cases: list[Case], targets: Targets) -> tuple[int, list[str]]:
    """Send every case onto ``requests``: (records sent, the records not sent).

    A record past the broker's limit (a ``record_edge`` case just past it) is
    not sent: the broker would refuse it, so it could never reach the topic
    and the checker expects nothing of it.
    """
    producer = new_producer(stack.settings, "agui-faults-fuzz", linger_ms=5)
    await producer.start()
    history: list[dict[str, Any]] = []
    request_ids: list[tuple[str, str]] = []
    refused: list[str] = []
    try:
        pending = [await producer.send(stack.settings.topics.requests, value, key=key)
                   for key, value in shared_request_id_burst()]
        for case in cases:
            key, value, headers = kafka_record(case, targets, history, request_ids)
            size = record_size(key, value, headers)
            if size > targets.broker_limit_bytes:
                refused.append(f"{case.kind} #{case.n} ({size} bytes)")
                continue
            pending.append(await producer.send(stack.settings.topics.requests, value,
                                               key=key, headers=headers))
            if len(pending) >= 500:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return len(cases) - len(refused), refused


# The cases are drawn in a worker thread while the deployment starts; Kafka clients on the
# event loop use the ``random`` module meanwhile, which Hypothesis notices and warns about.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
async def test_fuzz_ten_thousand_adversarial_requests(
    kafka_bootstrap: str, tmp_path: Path, summary: Callable[[str], None]
) -> None:
    config = StackConfig(consumers=1, env={"AGUI_MAX_RECORD_BYTES": str(RECORD_LIMIT)})
    targets = Targets([], [i["id"] for i in INTERRUPTS], RECORD_LIMIT, BODY_LIMIT)
    started = time.monotonic()
    # Drawing takes a while: do it (in one thread: Hypothesis runs one test at a time)
    # while the deployment starts.
    drawing = asyncio.ensure_future(asyncio.to_thread(lambda: (
        draw_cases(targets, COMMON + HTTP_ONLY, CASES // 2, 1),
        draw_cases(targets, COMMON + KAFKA_ONLY, CASES - CASES // 2, 2))))
    async with Stack(kafka_bootstrap, unique_prefix("fz"), tmp_path, config) as stack:
        async with Follower(stack.settings) as follower, KafkaLoad(
                stack.settings, follower, resend_s=10.0, delay_ms=20) as load:
            targets.interrupted.extend(await interrupted_threads(load, 30))
            assert targets.interrupted, "no thread could be left interrupted"
            http_cases, kafka_cases = await drawing
            drawn_s = time.monotonic() - started
            before = stack.rss_kib()
            (outcomes, unclear), (sent, refused), stats = await asyncio.gather(
                push_http(stack.consumer_urls[0], http_cases, targets),
                push_kafka(stack, kafka_cases, targets),
                load.run(flows=60, concurrency=6, duration_s=240))
            pushed_s = time.monotonic() - started - drawn_s
            probe_s = await stack.probe(60.0)
            after = stack.rss_kib()
        growth = growth_mib(before, after)
        kinds = Counter(c.kind for c in http_cases + kafka_cases)
        await verify(
            stack, summary, "fuzz",
            f"{len(http_cases)} cases over HTTP + {sent} onto requests "
            f"({len(refused)} past the broker's limit not sent) "
            f"(set up and drawn in {drawn_s:.1f} s, pushed in {pushed_s:.1f} s; kinds "
            f"{dict(kinds)}); "
            f"HTTP answers {dict(outcomes.most_common())} ({len(unclear)} unclear: "
            f"{'; '.join(unclear[:3])}); valid flows beside: {stats.line()}; "
            f"probe after {probe_s:.1f} s; RSS growth MiB {growth} (before KiB {before})",
            settle_s=90.0)
        assert not unclear, f"{len(unclear)} unclear HTTP answers, e.g.:\n" + "\n".join(
            unclear[:20])
        assert stats.gave_up == 0, stats.line()
        assert stats.flows_completed == stats.flows, stats.line()
        assert all(g < RSS_GROWTH_LIMIT_MIB for g in growth.values()), growth
