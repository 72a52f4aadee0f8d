"""Streams under stress, several instances, and the operational routes, on the real broker."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import orjson
import pytest
from consumer_harness import (
    AGENT,
    Backstage,
    data_values,
    finished,
    run_input,
    serving,
    started,
)

from services.consumer.relay import Relay
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def until_streams(relay: Relay, count: int) -> None:
    async with asyncio.timeout(20):
        while relay.fanout.stream_count != count:
            await asyncio.sleep(0.02)


async def open_then_drop(app_url: str, body: dict[str, object], backstage: Backstage,
                         relay: Relay) -> None:
    """POST, get admitted, read the first frame, then close the connection."""
    thread, run = str(body["threadId"]), str(body["runId"])

    async def admit() -> None:
        await backstage.decide(await backstage.next_request())
        await backstage.emit(thread, run, [started(thread, run)])

    admitting = asyncio.create_task(admit())
    async with (httpx.AsyncClient(base_url=app_url, timeout=20) as http,
                http.stream("POST", f"/agents/{AGENT}", json=body) as response):
        await admitting
        async for chunk in response.aiter_raw():
            assert b"RUN_STARTED" in chunk
            break
    await until_streams(relay, 0)


async def test_a_disconnecting_client_does_not_cancel_by_default(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        await open_then_drop(app.url, run_input(), backstage, app.relay)
        assert not app.relay.tasks
        metrics = (await app.http.get("/metrics")).text
    assert await backstage.control_count() == 0
    assert 'agui_consumer_cancels_total{origin="disconnect"}' not in metrics


async def test_a_disconnecting_client_cancels_when_configured(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, cancel_on_disconnect=True) as app:
        body = run_input()
        await open_then_drop(app.url, body, backstage, app.relay)
        (command,) = await backstage.control_commands(1)
    assert (command.thread_id, command.run_id) == (body["threadId"], body["runId"])


async def test_a_slow_client_continues_from_the_log_and_does_not_stall_the_others(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """A client that reads nothing fills its queue and goes on from the log (it gets all
    of its run once it reads); a fast one is served meanwhile."""
    async with serving(kafka, stream_queue=16) as app:
        slow, fast = run_input(), run_input()
        big = "x" * 200_000
        async with httpx.AsyncClient(base_url=app.url, timeout=30) as http:
            slow_post = asyncio.create_task(http.send(
                http.build_request("POST", f"/agents/{AGENT}", json=slow), stream=True))
            await backstage.decide(await backstage.next_request())
            slow_response = await slow_post  # headers only; the body is never read
            fast_post = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=fast))
            await backstage.decide(await backstage.next_request())
            st, sr = str(slow["threadId"]), str(slow["runId"])
            ft, fr = str(fast["threadId"]), str(fast["runId"])
            await backstage.emit(st, sr, [started(st, sr)])
            await backstage.emit(ft, fr, [started(ft, fr)])
            # 200 large events for the slow run: far more than its queue and the sockets hold
            await backstage.emit(st, sr, [{"type": "CUSTOM", "name": "pad", "value": big}] * 200,
                                 seqs=range(1, 201))
            await backstage.emit(ft, fr, [finished(ft, fr)], seqs=[1])
            fast_response = await fast_post
            async with asyncio.timeout(20):
                while "agui_consumer_streams_to_log_total 1.0" not in (
                        await app.http.get("/metrics")).text:
                    await asyncio.sleep(0.1)
            await backstage.emit(st, sr, [finished(st, sr)], seqs=[201])
            body = b"".join([chunk async for chunk in slow_response.aiter_raw()])
            await slow_response.aclose()
            metrics = (await app.http.get("/metrics")).text
    assert [orjson.loads(v)["type"] for v in data_values(fast_response.content)] == [
        "RUN_STARTED", "RUN_FINISHED"]
    types = [orjson.loads(v)["type"] for v in data_values(body)]
    assert types == ["RUN_STARTED", *["CUSTOM"] * 200, "RUN_FINISHED"]
    assert "slow_client" not in metrics


async def test_every_instance_routes_what_its_own_clients_wait_for(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """Two instances read all partitions; each serves its own streams."""
    async with serving(kafka) as one, serving(kafka) as two:
        inputs = [run_input(thread_id=f"th-{uuid.uuid4().hex[:6]}") for _ in range(8)]
        posts = [asyncio.create_task((one if i % 2 else two).http.post(
            f"/agents/{AGENT}", json=body)) for i, body in enumerate(inputs)]
        for _ in inputs:
            request = await backstage.next_request()
            t, r = request.input.thread_id, request.input.run_id
            await backstage.decide(request)
            await backstage.emit(t, r, [started(t, r), finished(t, r)])
        responses = await asyncio.gather(*posts)
    for body, response in zip(inputs, responses, strict=True):
        assert response.status_code == 200
        values = [orjson.loads(v) for v in data_values(response.content)]
        assert [v["runId"] for v in values] == [body["runId"]] * 2


async def test_health_readiness_metrics_and_openapi(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        health = await app.http.get("/healthz")
        ready = await app.http.get("/readyz")
        body = run_input()
        t, r = body["threadId"], body["runId"]
        post = asyncio.create_task(app.http.post(f"/agents/{AGENT}", json=body))
        await backstage.decide(await backstage.next_request())
        await backstage.emit(t, r, [started(t, r), finished(t, r)])
        await post
        metrics = (await app.http.get("/metrics")).text
        openapi = (await app.http.get("/openapi.json")).json()
    assert health.json() == {"status": "ok"}
    assert ready.json() == {"status": "ready", "checks": {
        "broker": True, "topics": True, "fanout": True, "threadView": True}}
    assert 'agui_consumer_requests_total{verdict="admitted"} 1.0' in metrics
    assert "agui_consumer_decision_wait_seconds_count 1.0" in metrics
    assert "agui_consumer_sse_streams_open 0.0" in metrics
    paths = openapi["paths"]
    assert set(paths) >= {"/agents/{agent}", "/threads/{thread_id}",
                          "/threads/{thread_id}/runs/{run_id}/events",
                          "/threads/{thread_id}/runs/{run_id}/cancel",
                          "/healthz", "/readyz", "/metrics"}
    run = paths["/agents/{agent}"]["post"]
    assert run["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/RunAgentInput")
    assert "text/event-stream" in run["responses"]["200"]["content"]
    assert {"400", "404", "409", "422", "504"} <= set(run["responses"])
    schemas = openapi["components"]["schemas"]
    assert "threadId" in schemas["RunAgentInput"]["properties"]
    assert "interruptIds" in schemas["Problem"]["properties"]


async def test_without_topics_the_instance_serves_but_is_not_ready(
        kafka_bootstrap: str) -> None:
    empty = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
                          AGUI_TOPIC_PREFIX=f"none{uuid.uuid4().hex[:8]}", AGUI_PARTITIONS=4)
    async with serving(empty, startup_timeout_s=0.2, agents=AGENT) as app:
        ready = await app.http.get("/readyz")
        health = await app.http.get("/healthz")
        post = await app.http.post(f"/agents/{AGENT}", json=run_input())
    assert ready.status_code == 503
    assert ready.json()["checks"]["topics"] is False
    assert "missing topics" in ready.json()["detail"]
    assert health.status_code == 200
    assert (post.status_code, post.json()["code"]) == (503, "not_ready")


async def test_clients_leaving_a_stopping_instance_do_not_cancel_their_runs(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """Even with AGUI_CANCEL_ON_DISCONNECT, streams ended by a shutdown leave runs running."""
    from services.consumer import server
    from services.consumer.settings import ConsumerSettings

    stop = asyncio.Event()
    urls: list[str] = []
    settings = ConsumerSettings(http_port=0, cancel_on_disconnect=True)
    serving_task = asyncio.create_task(server.serve(settings, kafka, stop, on_ready=urls.append))
    async with asyncio.timeout(20):
        while not urls:
            await asyncio.sleep(0.02)
    body = run_input()
    thread, run = str(body["threadId"]), str(body["runId"])

    async def admit() -> None:
        await backstage.decide(await backstage.next_request())
        await backstage.emit(thread, run, [started(thread, run)])

    admitting = asyncio.create_task(admit())
    async with (httpx.AsyncClient(base_url=urls[0], timeout=20) as http,
                http.stream("POST", f"/agents/{AGENT}", json=body) as response):
        await admitting
        async for chunk in response.aiter_raw():
            assert b"RUN_STARTED" in chunk
            stop.set()  # the instance starts stopping; its client goes away
            break
    await serving_task
    assert await backstage.control_count() == 0
