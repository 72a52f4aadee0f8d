"""Observing a real deployment: metrics, health, one trace end to end, JSON logs, no secret.

The gatekeeper, a producer worker and a consumer service run as processes
against the real broker's SASL listener (SCRAM-SHA-256, the password in
their environment). Through the consumer's HTTP face: a traced run that
ends interrupted (its interrupt expiring seconds later), and a long run
that is left running, then cancelled; then a two-agent pipeline whose
child run must stay in its parent's trace. Meanwhile and after, the test
scrapes the consumer's ``/metrics`` and the gatekeeper's and producer's
health ports and checks the counters and gauges moved as the runs did,
``agui-relay stuck`` reports what the gatekeeper's gauges count, the
``traceparent`` of the HTTP request runs through the request, decision,
dispatch and every event record with a new span at each hop (and on into a
delegated child run), every stderr line of every service is a JSON object,
each line about a run names its thread, run and request, and the password
appears in no scrape and no log.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest
from observed_stack import REPO, observed_stack, with_name

from contracts import Decision, Dispatch, RunRequest, decode
from contracts.headers import TRACEPARENT, header_value
from services.kafka.admin import ensure_topics
from services.kafka.clients import ConsumerRecord
from services.kafka.reader import TopicReader
from services.producer.delegation import CHILD_METADATA
from services.runtime.settings import KafkaSettings
from services.runtime.tracing import parse

if TYPE_CHECKING:
    from conftest import SaslEndpoint

pytestmark = pytest.mark.integration

AGENT = "scripted"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
CLIENT_TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
PIPELINE_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PIPELINE_AGENTS = ("pipeline_parent", "pipeline_child")
RUNNING_TOO_LONG_S = 2


def run_body(thread_id: str, run_id: str, script: dict[str, Any]) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": run_id, "state": {}, "tools": [], "context": [],
            "messages": [{"id": f"m-{run_id}", "role": "user", "content": "hello"}],
            "forwardedProps": {"script": script}}


async def frames(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The events of an SSE response, as they arrive."""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield orjson.loads(line[len("data: "):])


async def read_topic(settings: KafkaSettings, topic: str, key: str
                     ) -> list[ConsumerRecord[Any, Any]]:
    async with TopicReader(settings, "observability-test") as reader:
        records = await reader.read_all([await reader.key_partition(topic, key)])
    return [r for r in records if r.key == key.encode()]


def span_of(record: ConsumerRecord[Any, Any], trace_id: str = TRACE_ID) -> str:
    """The record's span id, after checking it belongs to the trace ``trace_id``."""
    parent = parse(header_value(record.headers, TRACEPARENT))
    assert parent is not None, f"{record.topic}@{record.offset} has no valid traceparent"
    assert parent.trace_id == trace_id, record.topic
    return parent.span_id


async def stuck_report(settings: KafkaSettings, limit: str) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
           "AGUI_TOPIC_PREFIX": settings.topic_prefix}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.ops", "stuck", "--running-longer-than", limit,
        "--json", cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    report = orjson.loads(out)
    assert isinstance(report, dict)
    return report


async def test_a_deployment_shows_its_runs_in_metrics_traces_and_logs(
    kafka_bootstrap: str, kafka_sasl: SaslEndpoint, topic_prefix: str, tmp_path: Path
) -> None:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                             partitions=2)
    await ensure_topics(settings, (AGENT, *PIPELINE_AGENTS))
    env = {
        "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1",
        "KAFKA_BOOTSTRAP_SERVERS": kafka_sasl.bootstrap,
        "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "KAFKA_SASL_USERNAME": kafka_sasl.username, "KAFKA_SASL_PASSWORD": kafka_sasl.password,
        "AGUI_TOPIC_PREFIX": topic_prefix, "AGUI_PARTITIONS": "2",
        "AGUI_AGENTS": ",".join([f"{AGENT}=services.producer.agents.scripted:agent",
                                 *(f"{a}=services.producer.agents.{a}:agent"
                                   for a in PIPELINE_AGENTS)]),
        "AGUI_LOG_LEVEL": "DEBUG",
        "AGUI_GATEKEEPER_GAUGES_S": "0.5", "AGUI_RUNNING_TOO_LONG_S": str(RUNNING_TOO_LONG_S),
        "AGUI_GATEKEEPER_SESSION_TIMEOUT_MS": "6000",
        "AGUI_PRODUCER_SESSION_TIMEOUT_MS": "6000",
    }
    expires_at = (datetime.now(UTC) + timedelta(seconds=4)).isoformat(timespec="milliseconds")
    interrupted = run_body("t-obs-1", "r-obs-1", {
        "text": "thinking", "delayMs": 1500,
        "interrupts": [{"id": "i-obs", "reason": "confirm", "expiresAt": expires_at}]})
    long_run = run_body("t-obs-2", "r-obs-2", {"text": "working", "delayMs": 120_000})

    async with observed_stack(env, tmp_path) as stack:
        for role in ("gatekeeper", "producer"):
            assert (await stack.http.get(f"{stack.url(role)}/healthz")).status_code == 200

        # 1. a traced run: in flight while it streams, then finished by interrupt
        consumer = stack.url("consumer")
        async with stack.http.stream("POST", f"{consumer}/agents/{AGENT}", json=interrupted,
                                     headers={"traceparent": CLIENT_TRACEPARENT}) as response:
            assert response.status_code == 200
            events = frames(response)
            assert (await anext(events))["type"] == "RUN_STARTED"
            assert await stack.value("consumer", "agui_consumer_sse_streams_open") == 1
            assert await stack.value("producer", "agui_runs_in_flight", agent=AGENT) == 1
            rest = [event async for event in events]
        assert rest[-1]["type"] == "RUN_FINISHED"
        assert rest[-1]["outcome"]["type"] == "interrupt"
        await stack.until("producer", "agui_runs_finished_total", 1, agent=AGENT,
                          outcome="interrupt")
        await stack.until("consumer", "agui_consumer_sse_streams_open", 0)

        # 2. a long run, left running after its client goes away
        async with stack.http.stream("POST", f"{consumer}/agents/{AGENT}",
                                     json=long_run) as response:
            assert response.status_code == 200
            assert (await anext(frames(response)))["type"] == "RUN_STARTED"

        # 3. the gatekeeper's gauges and the stuck report agree: the long run is the
        #    one running thread (the first one is interrupted), its interrupt expired
        await stack.until_all("gatekeeper", {
            ("agui_threads", frozenset({("status", "running")})): 1,
            ("agui_threads", frozenset({("status", "interrupted")})): 1,
            ("agui_threads_running_too_long", frozenset()): 1,
            ("agui_open_interrupts", frozenset()): 1,
            ("agui_expired_interrupts", frozenset()): 1,
        })
        report = await stuck_report(settings, f"{RUNNING_TOO_LONG_S}s")
        assert (report["runningTooLong"], report["expiredInterrupts"]) == (1, 1), report
        assert {t["threadId"] for t in report["threads"]} == {"t-obs-1", "t-obs-2"}

        # 4. cancelled: in flight no more
        cancel = await stack.http.post(f"{consumer}/threads/t-obs-2/runs/r-obs-2/cancel")
        assert cancel.status_code == 202
        await stack.until("producer", "agui_runs_finished_total", 1, agent=AGENT,
                          outcome="cancelled")
        await stack.until("producer", "agui_runs_in_flight", 0, agent=AGENT)
        await stack.until("gatekeeper", "agui_threads_running_too_long", 0)

        # 5. the counters of each service
        gatekeeper = await stack.metrics("gatekeeper")
        decisions = with_name(gatekeeper, "agui_decisions_total")
        assert decisions == {frozenset({("verdict", "admitted"), ("code", "none")}): 2}
        assert with_name(gatekeeper, "agui_decision_latency_seconds_count") == {frozenset(): 2}
        assert with_name(gatekeeper, "agui_gatekeeper_processing_seconds_count")[frozenset()] >= 1
        lags = with_name(gatekeeper, "agui_consumer_lag")
        assert {dict(labels)["group"] for labels in lags} == {f"{topic_prefix}.gatekeeper"}
        assert {dict(labels)["topic"] for labels in lags} == {
            f"{topic_prefix}.requests", f"{topic_prefix}.runs"}  # never events
        producer = await stack.metrics("producer")
        assert with_name(producer, "agui_runs_started_total") == {
            frozenset({("agent", AGENT)}): 2}
        lags = with_name(producer, "agui_consumer_lag")
        assert {dict(labels)["group"] for labels in lags} == {
            f"{topic_prefix}.producer.{agent}" for agent in (AGENT, *PIPELINE_AGENTS)}
        served = await stack.metrics("consumer")
        assert with_name(served, "agui_consumer_requests_total") == {
            frozenset({("verdict", "admitted")}): 2}
        assert {dict(labels)["group"] for labels in with_name(served, "agui_consumer_lag")} == {
            f"{topic_prefix}.consumer.fanout", f"{topic_prefix}.consumer.thread-view"}
        for samples in (gatekeeper, producer, served):
            assert not with_name(samples, "agui_dead_letters_total")

        # 6. a two-agent pipeline: the child run's request continues the parent's trace
        pipeline = {"threadId": "t-pipe", "runId": "r-pipe", "state": {}, "tools": [],
                    "context": [], "forwardedProps": {},
                    "messages": [{"id": "m-pipe", "role": "user", "content": "the report"}]}
        async with stack.http.stream(
                "POST", f"{consumer}/agents/pipeline_parent", json=pipeline,
                headers={"traceparent": f"00-{PIPELINE_TRACE_ID}-{CLIENT_SPAN}-01"}) as response:
            assert response.status_code == 200
            ending = [event async for event in frames(response)][-1]
        assert ending["outcome"]["type"] == "interrupt", ending
        (carried,) = ending["outcome"]["interrupts"]
        child_thread = carried["metadata"][CHILD_METADATA]["threadId"]
        assert child_thread.startswith("t-pipe/review-"), child_thread

    # 7. one trace from the HTTP request to the events, a new span at each hop
    (request,) = await read_topic(settings, settings.topics.requests, "t-obs-1")
    (decision,) = await read_topic(settings, settings.topics.decisions, "t-obs-1")
    (dispatch,) = await read_topic(settings, settings.topics.dispatch(AGENT), "t-obs-1")
    run_events = await read_topic(settings, settings.topics.events, "t-obs-1")
    request_id = decode(RunRequest, request.value).request_id
    assert decode(Decision, decision.value).request_id == request_id
    assert decode(Dispatch, dispatch.value).request_id == request_id
    assert len(run_events) == len(rest) + 1
    consumer_span, gatekeeper_span = span_of(request), span_of(decision)
    assert span_of(dispatch) == gatekeeper_span
    worker_spans = {span_of(e) for e in run_events}
    assert len(worker_spans) == 1
    assert len({CLIENT_SPAN, consumer_span, gatekeeper_span, *worker_spans}) == 4
    for thread in ("t-pipe", child_thread):
        (request,) = await read_topic(settings, settings.topics.requests, thread)
        run_events = await read_topic(settings, settings.topics.events, thread)
        assert run_events
        for record in (request, *run_events):
            span_of(record, PIPELINE_TRACE_ID)

    # 8. JSON logs: every line about a run names its thread, run and request
    password = kafka_sasl.password
    for text in stack.texts:
        assert password not in text
    runs = {"t-obs-1": "r-obs-1", "t-obs-2": "r-obs-2", "t-pipe": "r-pipe",
            child_thread: "r-pipe/review-"}
    traces = {"t-obs-1": TRACE_ID, "t-pipe": PIPELINE_TRACE_ID,
              child_thread: PIPELINE_TRACE_ID}
    for role, service in stack.services.items():
        assert password not in service.log_path.read_text("utf-8")
        lines = service.log_lines()
        about = [d for d in lines if any(f'"{t}' in orjson.dumps(d).decode() for t in runs)]
        named = {d.get("threadId") for d in about}
        assert named >= {"t-obs-1", "t-obs-2", "t-pipe"}, (role, about)
        assert named <= set(runs), (role, about)
        for doc in about:
            assert doc["runId"].startswith(runs[doc["threadId"]]), (role, doc)
            assert doc.get("requestId"), (role, doc)
            assert doc["service"] == role
            # the gatekeeper's lines are written for many runs at once: no one trace
            if role != "gatekeeper" and doc["threadId"] in traces:
                assert doc.get("traceId") == traces[doc["threadId"]], (role, doc)
