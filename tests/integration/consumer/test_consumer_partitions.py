"""Instances own partitions, and any instance takes any request (issue 15, items 2 and 3).

Three instances of the real app on the real broker, the backstage playing
gatekeeper and producer. Runs on threads covering every partition are each
posted to a random instance: every run streams complete and in order, each
event record is read by exactly one instance (the per-instance count of
records routed, against what the backstage wrote on each one's partitions),
and forwarding answers as a local request does — authentication, another
tenant's 404, a rejection's problem, a replay with ``Last-Event-ID`` and a
finished run's 204 — with the loop guard refusing a forwarded request its
receiver does not own.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from consumer_harness import (
    AGENT,
    WAIT_S,
    Backstage,
    Served,
    data_values,
    finished,
    run_input,
    serving,
    sse_frames,
    started,
)
from slow_sse import counter, emit_pads, open_run, slow_http, until

from contracts import EventHeaders, ThreadState
from deploy.kafka import launcher
from services.consumer.forward import ATTEMPT, FORWARDED_BY, REQUEST_ID
from services.consumer.protocol import HEADER_LINE_EXTRA, REQUEST_LINE_EXTRA
from services.consumer.settings import ConsumerSettings
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOKEN_A = f"key-a-{uuid.uuid4().hex}"
TOKEN_B = f"key-b-{uuid.uuid4().hex}"
A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}
KEYS = f"{TOKEN_A}=tenant-a,{TOKEN_B}=tenant-b"
EVENTS = 12
"""Content events per run, between its start and its end."""


async def settled(instances: Sequence[Served]) -> None:
    """Until every instance routes by the same map, naming them all, every partition owned."""
    urls = {i.url for i in instances}
    async with asyncio.timeout(WAIT_S):
        while True:
            maps = {i.relay.fanout.ownership.owners for i in instances}
            ready = all(i.relay.fanout.ownership.settled.is_set() for i in instances)
            if ready and len(maps) == 1 and set(next(iter(maps))) == urls:
                owned = [p for i in instances for p in i.relay.fanout.ownership.mine]
                if sorted(owned) == list(range(len(next(iter(maps))))):
                    return
            await asyncio.sleep(0.05)


@asynccontextmanager
async def three(kafka: KafkaSettings, **overrides: Any) -> AsyncIterator[list[Served]]:
    async with AsyncExitStack() as stack:
        instances = [await stack.enter_async_context(serving(kafka, **overrides))
                     for _ in range(3)]
        await settled(instances)
        yield instances


def owner(instances: Sequence[Served], thread_id: str) -> Served:
    partition = instances[0].relay.fanout.partition_of(thread_id)
    (found,) = [i for i in instances if partition in i.relay.fanout.ownership.mine]
    return found


def not_owner(instances: Sequence[Served], thread_id: str) -> Served:
    return next(i for i in instances if i is not owner(instances, thread_id))


async def both(pair: Sequence[Served], method: str, path: str,
               headers: dict[str, str] | None = None) -> tuple[httpx.Response, httpx.Response]:
    """The same request through each of ``pair`` (the owner, then another instance)."""
    first = await pair[0].http.request(method, path, headers=headers)
    second = await pair[1].http.request(method, path, headers=headers)
    return first, second


def threads_on_every_partition(kafka: KafkaSettings, each: int) -> list[str]:
    found: dict[int, list[str]] = {p: [] for p in range(kafka.partitions)}
    while any(len(v) < each for v in found.values()):
        thread_id = f"pt-{uuid.uuid4().hex[:10]}"
        bucket = found[partition_for(thread_id, kafka.partitions)]
        if len(bucket) < each:
            bucket.append(thread_id)
    return [t for v in found.values() for t in v]


def placed(kafka: KafkaSettings, instances: Sequence[Served]) -> tuple[str, Served, Served]:
    """A new thread, its owner and another instance."""
    thread = threads_on_every_partition(kafka, 1)[0]
    return thread, owner(instances, thread), not_owner(instances, thread)


def routed(instance: Served) -> float:
    value = instance.relay.metrics.records_routed.labels("events")._value.get()
    assert isinstance(value, float)
    return value


def assert_whole(response: httpx.Response, body: dict[str, Any], events: int) -> None:
    """The run streamed complete and in order: its start, ``events`` numbered ones, its end."""
    assert response.status_code == 200, response.text
    values = [orjson.loads(v) for v in data_values(response.content)]
    assert [v["type"] for v in values] == ["RUN_STARTED", *["CUSTOM"] * events,
                                           "RUN_FINISHED"]
    assert [v["value"] for v in values[1:-1]] == list(range(events))
    assert {values[0]["runId"], values[-1]["runId"]} == {body["runId"]}


async def play(backstage: Backstage, count: int) -> dict[str, int]:
    """Decide and stream ``count`` requests as they come; event records written per thread."""
    written: dict[str, int] = {}
    for _ in range(count):
        request = await backstage.next_request()
        t, r = request.input.thread_id, request.input.run_id
        await backstage.decide(request)
        events = [started(t, r), *({"type": "CUSTOM", "name": "n", "value": i}
                                   for i in range(EVENTS)), finished(t, r)]
        await backstage.emit(t, r, events)
        written[t] = written.get(t, 0) + len(events)
    return written


async def test_each_event_is_read_by_one_instance_and_every_run_streams_whole(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    rng = random.Random(15)
    async with three(kafka) as instances:
        before = [routed(i) for i in instances]
        threads = threads_on_every_partition(kafka, 2)
        inputs = [run_input(thread_id=t) for t in threads]
        chosen = [rng.choice(instances) for _ in inputs]
        posts = [asyncio.create_task(i.http.post(f"/agents/{AGENT}", json=body))
                 for i, body in zip(chosen, inputs, strict=True)]
        written = await play(backstage, len(inputs))
        responses = await asyncio.gather(*posts)
        read = [routed(i) - b for i, b in zip(instances, before, strict=True)]
        forwards = sum(i.relay.metrics.forwards.labels("forwarded")._value.get()
                       for i in instances)
        owned = [i.relay.fanout.ownership.mine for i in instances]  # before any leaves
        posted_away = sum(1 for i, b in zip(chosen, inputs, strict=True)
                          if owner(instances, b["threadId"]) is not i)
    for body, response in zip(inputs, responses, strict=True):
        assert_whole(response, body, EVENTS)
    assert all(len(mine) >= 1 for mine in owned)
    for mine, count in zip(owned, read, strict=True):
        expected = sum(n for t, n in written.items()
                       if partition_for(t, kafka.partitions) in mine)
        assert count == expected, (sorted(mine), count, expected)
    assert sum(read) == sum(written.values())
    assert forwards == posted_away


async def test_a_forward_answers_as_the_owner_does(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with three(kafka, api_keys=KEYS) as instances:
        thread, home, away = placed(kafka, instances)
        body = run_input(thread_id=thread)
        post = asyncio.create_task(away.http.post(f"/agents/{AGENT}", json=body, headers=A))
        request = await backstage.next_request()
        assert request.principal == "tenant-a"
        t, r = thread, str(body["runId"])
        await backstage.decide(request)
        await backstage.write_state(ThreadState(
            thread_id=t, status="running", agent=AGENT, principal="tenant-a", run_id=r,
            recent_run_ids=[r]), t)
        await backstage.emit(t, r, [started(t, r), *({"type": "CUSTOM", "name": "n",
                                                      "value": i} for i in range(3)),
                                    finished(t, r)])
        streamed = await post
        assert streamed.status_code == 200
        assert len(data_values(streamed.content)) == 5

        for path, method in ((f"/threads/{t}", "GET"), (f"/threads/{t}/runs/{r}/events", "GET"),
                             (f"/threads/{t}/runs/{r}/cancel", "POST")):
            # no key: refused at the first hop, as at the owner
            local, remote = await both((home, away), method, path)
            assert (remote.status_code, remote.json()) == (local.status_code, local.json()) \
                == (401, remote.json())
            assert remote.headers["www-authenticate"] == local.headers["www-authenticate"]
            # another tenant: the same 404 through either
            local, remote = await both((home, away), method, path, B)
            assert remote.status_code == local.status_code == 404
            assert remote.content == local.content
            assert remote.headers["content-type"] == "application/problem+json"
            # written once, by the instance the client asked (passed on, it came twice)
            assert len(remote.headers.get_list("date")) == 1
            assert len(remote.headers.get_list("server")) <= 1

        # the owner's tenant: a replay from Last-Event-ID, then the finished run's 204
        for after, frames in (("1", 3), ("4", 0)):
            headers = {**A, "Last-Event-ID": after}
            local, remote = await both((home, away), "GET", f"/threads/{t}/runs/{r}/events",
                                       headers)
            assert remote.status_code == local.status_code == (200 if frames else 204)
            assert remote.content == local.content
            assert len(data_values(remote.content)) == frames
            if frames:
                assert [f["id"] for f in sse_frames(remote.content) if "id" in f] == \
                    ["2", "3", "4"]

        # a rejection's problem passes through whole, status and body
        busy = run_input(thread_id=thread)
        post = asyncio.create_task(away.http.post(f"/agents/{AGENT}", json=busy, headers=A))
        await backstage.decide(await backstage.next_request(), "rejected", code="thread_busy",
                               message="the thread is running another run")
        refused = await post
        assert refused.status_code == 409
        assert refused.json()["code"] == "thread_busy"
        assert refused.headers["content-type"] == "application/problem+json"


async def test_a_forwarded_request_is_never_forwarded_again(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with three(kafka) as instances:
        thread = threads_on_every_partition(kafka, 1)[0]
        away = not_owner(instances, thread)
        answer = await away.http.get(f"/threads/{thread}",
                                     headers={FORWARDED_BY: "http://elsewhere"})
        assert answer.status_code == 503
        assert answer.json()["code"] == "owner_unavailable"
        assert int(answer.headers["retry-after"]) >= 1
        plain = await away.http.get(f"/threads/{thread}")
        assert plain.status_code == 404  # forwarded to the owner, which knows no such thread
        assert plain.json()["code"] == "unknown_thread"


async def test_a_client_leaving_a_forwarded_stream_cancels_its_run_once_from_where_it_was(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """With AGUI_CANCEL_ON_DISCONNECT, the forwarding instance cancels the run (the owner
    only sees its connection closed, which an idle cut closes too), and the owner's stream
    ends."""
    async with three(kafka, cancel_on_disconnect=True) as instances:
        thread, home, away = placed(kafka, instances)
        body = run_input(thread_id=thread)
        async with httpx.AsyncClient(base_url=away.url, timeout=WAIT_S) as http:
            post = asyncio.create_task(http.send(
                http.build_request("POST", f"/agents/{AGENT}", json=body), stream=True))
            await backstage.decide(await backstage.next_request())
            t, r = thread, str(body["runId"])
            await backstage.emit(t, r, [started(t, r)])
            response = await post
            async for chunk in response.aiter_raw():
                assert b"RUN_STARTED" in chunk
                break
            await response.aclose()
        (command,) = await backstage.control_commands(1)
        assert (command.thread_id, command.run_id) == (t, r)
        async with asyncio.timeout(WAIT_S):
            while home.relay.fanout.stream_count:
                await asyncio.sleep(0.05)
        assert counter(away.relay, "agui_consumer_cancels_total", origin="disconnect") == 1
        assert counter(home.relay, "agui_consumer_cancels_total", origin="disconnect") == 0


async def test_a_forwarded_client_cut_for_reading_nothing_does_not_cancel_its_run(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """A client cut for reading nothing keeps its run, through a forward as directly: the
    forwarding instance cuts it and closes its connection to the owner, which had taken
    that for the client leaving and cancelled the run."""
    async with three(kafka, stream_queue=16, stream_idle_s=1.0,
                     cancel_on_disconnect=True) as instances:
        thread, home, away = placed(kafka, instances)
        async with slow_http(away.url) as http:
            _, run_id, reader = await open_run(http, backstage, thread)
            await emit_pads(backstage, thread, run_id, 1, 3000, 4096)  # 12 MB: past the sockets
            await until(lambda: counter(away.relay,
                                        "agui_consumer_streams_idle_closed_total") >= 1,
                        "the forwarding instance never cut its idle client")
            await until(lambda: home.relay.fanout.stream_count == 0,
                        "the owner's stream stayed open")
            await asyncio.sleep(1.0)
            await reader.response.aclose()
        for instance in (home, away):
            assert counter(instance.relay, "agui_consumer_cancels_total",
                           origin="disconnect") == 0
    assert await backstage.control_count() == 0


async def test_a_client_that_forges_the_forwarded_header_is_still_cut_for_reading_nothing(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """``agui-forwarded-by`` can come from any client: one that sent it and read nothing
    held its stream, its connection and a log reader for ever. A forwarded request's clock
    runs three times as long (the forwarding instance cuts its own client within two), not
    never."""
    async with serving(kafka, stream_queue=16, stream_idle_s=1.0) as app, \
            slow_http(app.url) as http:
        body = run_input(f"forged-{uuid.uuid4().hex[:8]}")
        thread, run_id = str(body["threadId"]), str(body["runId"])
        post = asyncio.create_task(http.send(http.build_request(
            "POST", f"/agents/{AGENT}", json=body,
            headers={FORWARDED_BY: "http://not-an-instance"}), stream=True))
        await backstage.decide(await backstage.next_request())
        response = await post
        assert response.status_code == 200
        await backstage.emit(thread, run_id, [started(thread, run_id)])
        await emit_pads(backstage, thread, run_id, 1, 3000, 4096)
        await backstage.emit(thread, run_id, [finished(thread, run_id)], seqs=[3001])
        await until(lambda: counter(app.relay, "agui_consumer_streams_idle_closed_total") >= 1,
                    "a client forging agui-forwarded-by was never cut for reading nothing")
        await until(lambda: app.relay.fanout.stream_count == 0, "its stream stayed open")
        await response.aclose()


async def test_streams_open_on_an_instance_that_loses_their_partition_go_on_to_their_end(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """The old owner keeps reading a partition it lost for the streams open on it."""
    async with serving(kafka) as one:
        await settled([one])
        threads = threads_on_every_partition(kafka, 1)
        inputs = [run_input(thread_id=t) for t in threads]
        posts = [asyncio.create_task(one.http.post(f"/agents/{AGENT}", json=body))
                 for body in inputs]
        for _ in inputs:
            request = await backstage.next_request()
            t, r = request.input.thread_id, request.input.run_id
            await backstage.decide(request)
            await backstage.emit(t, r, [started(t, r), *({"type": "CUSTOM", "name": "n",
                                                          "value": i} for i in range(3))])
        async with serving(kafka) as two:
            await settled([one, two])
            assert two.relay.fanout.ownership.mine  # one lost partitions with streams on them
            for body in inputs:
                t, r = str(body["threadId"]), str(body["runId"])
                await backstage.emit(t, r, [*({"type": "CUSTOM", "name": "n", "value": i}
                                              for i in range(3, 6)), finished(t, r)],
                                     seqs=range(4, 8))
            responses = await asyncio.gather(*posts)
            assert two.relay.fanout.stream_count == 0
    for body, response in zip(inputs, responses, strict=True):
        assert_whole(response, body, 6)


async def test_a_run_end_read_before_a_rebalance_is_known_to_the_new_owner(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """Read-your-writes across instances and a handover: the gatekeeper never writes the
    closing states here, so only the instance that read each run's end can answer past
    it; the new owner of half the threads read their partitions from before its start."""
    threads = threads_on_every_partition(kafka, 1)
    async with serving(kafka, read_your_writes_s=0.5) as one:
        await settled([one])
        for thread in threads:
            await backstage.write_state(ThreadState(
                thread_id=thread, status="running", agent=AGENT, run_id="run-1",
                recent_run_ids=["run-1"]), thread)
            await backstage.emit(thread, "run-1", [started(thread, "run-1"),
                                                   finished(thread, "run-1")])
        async with asyncio.timeout(WAIT_S):
            while any(one.relay.fanout.ended.get((t, "run-1")) is None for t in threads):
                await asyncio.sleep(0.02)
        async with serving(kafka, read_your_writes_s=0.5) as two:
            await settled([one, two])
            moved = [t for t in threads if owner([one, two], t) is two]
            assert moved
            views = [(t, name, (await instance.http.get(f"/threads/{t}")).json())
                     for t in threads for name, instance in (("one", one), ("two", two))]
    behind = [(t, name, view) for t, name, view in views if view["status"] != "idle"]
    assert not behind, behind


async def test_a_forward_to_an_owner_gone_is_retried_once_ownership_moves_on(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """The map names an owner that is gone (as after a SIGKILL, until the group notices):
    the forward fails before any byte, waits for the next assignment, and is sent again
    by the new map (here, or to the new owner), published once."""
    async with serving(kafka) as one:
        await settled([one])
        thread = threads_on_every_partition(kafka, 1)[0]
        partition = one.relay.fanout.partition_of(thread)
        ownership = one.relay.fanout.ownership
        gone = f"http://127.0.0.1:{launcher.free_port()}"
        owners = list(ownership.owners)
        owners[partition] = gone
        ownership.update(ownership.mine - {partition}, owners)
        body = run_input(thread_id=thread)
        post = asyncio.create_task(one.http.post(f"/agents/{AGENT}", json=body))
        async with asyncio.timeout(WAIT_S):  # the first attempt failed; it waits for a new map
            while not one.relay.metrics.forwards.labels("failed_before_any_byte")._value.get():
                await asyncio.sleep(0.02)
        async with serving(kafka) as two:  # a rebalance: the next assignment
            request = await backstage.next_request()
            t, r = request.input.thread_id, request.input.run_id
            await backstage.decide(request)
            await backstage.emit(t, r, [started(t, r), finished(t, r)])
            response = await post
            retried = sum(i.relay.metrics.forwards.labels(o)._value.get()
                          for i in (one, two) for o in ("retried", "served_here"))
    assert response.status_code == 200, response.text
    assert len(data_values(response.content)) == 2
    assert retried == 1


async def raw_status(instance: Served, method: str, path: str,
                     headers: Sequence[tuple[str, str]]) -> tuple[int, bytes]:
    """Send one request head exactly as given (no client adds a header) and read the answer."""
    host, port = instance.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers), "", ""]
        writer.write("\r\n".join(lines).encode("latin-1"))
        await writer.drain()
        async with asyncio.timeout(WAIT_S):
            answer = await reader.read()  # Connection: close: the server ends it
        status_line, _, rest = answer.partition(b"\r\n")
        return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]
    finally:
        writer.close()


def head_of(size: int, method: str, path: str, host: str) -> list[tuple[str, str]]:
    """Headers making the request's head ``size`` bytes as the server counts it, the bulk in
    ``tracestate`` (a header the forward passes on)."""
    fixed = [("Host", host), ("Connection", "close"),
             *([("Content-Length", "0")] if method == "POST" else [])]
    counted = len(method) + len(path) + REQUEST_LINE_EXTRA + sum(
        len(k) + len(v) + HEADER_LINE_EXTRA for k, v in [*fixed, ("tracestate", "")])
    return [*fixed, ("tracestate", "v=" + "x" * (size - counted - 2))]


@pytest.mark.parametrize(("method", "route"), [("GET", "/threads/{t}"),
                                               ("POST", "/threads/{t}/runs/r1/cancel")])
async def test_a_head_at_the_limit_is_served_through_a_forward_as_by_the_owner(
        kafka: KafkaSettings, backstage: Backstage, method: str, route: str) -> None:
    """The forward adds headers of its own (the loop guard, the owner's Host, the attempt):
    a client's head at the byte limit must not become one past it on the way to the owner."""
    async with three(kafka) as instances:
        thread, home, away = placed(kafka, instances)
        limit = ConsumerSettings().http_max_header_bytes
        path = route.format(t=thread)

        async def through(instance: Served, size: int) -> tuple[int, bytes]:
            host = instance.url.removeprefix("http://")
            return await raw_status(instance, method, path, head_of(size, method, path, host))

        local = await through(home, limit)
        assert local[0] == 404, local  # served: no such thread
        assert (await through(home, limit + 1))[0] == 431
        assert await through(away, limit) == local
        assert (await through(away, limit + 1))[0] == 431  # refused at the first hop


SLOW_QUEUE = 16
SLOW_PADS = 4000
"""Events of 4 KiB: 16 MB, more than the sockets of both hops (client → instance → owner)
hold, so only backpressure through the forward can make the owner see a slow client."""


async def test_a_slow_client_through_a_forward_slows_the_owners_stream_and_loses_nothing(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """The forward passes bytes on only as fast as its client takes them (were it to read
    the owner's stream ahead into memory, the owner would never meet a slow reader): the
    owner's stream goes on from the log, and the client gets every event once, in order."""
    async with three(kafka, stream_queue=SLOW_QUEUE) as instances:
        thread, home, away = placed(kafka, instances)
        async with slow_http(away.url) as http:
            _, run_id, reader = await open_run(http, backstage, thread)
            await emit_pads(backstage, thread, run_id, 1, SLOW_PADS, 4096)
            await until(lambda: counter(home.relay, "agui_consumer_streams_to_log_total") >= 1,
                        "the owner never met the slow client behind the forward")
            await backstage.emit(thread, run_id, [finished(thread, run_id)],
                                 seqs=[SLOW_PADS + 1])
            await reader.read_to_end()
            await reader.response.aclose()
        dropped = counter(home.relay, "agui_consumer_streams_dropped_total", reason="slow_client")
    assert [seq for seq, _ in reader.frames] == list(range(SLOW_PADS + 2))
    assert reader.frames[-1][1] == "RUN_FINISHED"
    assert not reader.cut
    assert dropped == 0


OLD_RECORDS = 3000


async def test_a_retried_forward_reads_the_log_only_since_its_first_attempt(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """A retried forward's POST reads its run's records already written (the first attempt
    may have started it, through an owner this instance never heard from), but not the
    partition's history: any client can send the headers of a retried forward, and each
    would otherwise make the instance read the whole partition."""
    thread = threads_on_every_partition(kafka, 1)[0]
    an_hour_ago = int((time.time() - 3600) * 1000)
    sent = [await backstage.producer.send(
        kafka.topics.events, b'{"type":"CUSTOM","name":"old","value":0}',
        key=thread.encode(), headers=EventHeaders("old-run", "CUSTOM", AGENT, i).encode(),
        timestamp_ms=an_hour_ago) for i in range(OLD_RECORDS)]
    await asyncio.gather(*sent)
    body = run_input(thread_id=thread)
    t, r = thread, str(body["runId"])
    await backstage.emit(t, r, [started(t, r)])  # the first attempt's run, begun elsewhere
    # no replay index: where the run began is not remembered (as for a start another
    # instance routed, or one the index has let go)
    async with serving(kafka, replay_index_size=0) as one:
        await settled([one])
        retried = {FORWARDED_BY: "http://elsewhere", ATTEMPT: "2", REQUEST_ID: uuid.uuid4().hex}
        post = asyncio.create_task(one.http.post(f"/agents/{AGENT}", json=body, headers=retried))
        request = await backstage.next_request()
        assert request.request_id == retried[REQUEST_ID]
        await backstage.decide(request)
        await backstage.emit(t, r, [finished(t, r)], seqs=[1])
        response = await post
        scanned = one.relay.metrics.log_records_scanned.labels("retried_forward")._value.get()
    assert response.status_code == 200, response.text
    assert [orjson.loads(v)["type"] for v in data_values(response.content)] == \
        ["RUN_STARTED", "RUN_FINISHED"]
    assert 1 <= scanned <= 2, f"the retried POST read {scanned:.0f} records of the partition"


async def test_a_request_id_of_another_run_is_refused_not_streamed_for_ever(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """A client sending the forwarding headers itself, with the request id of a run it
    made before: the gatekeeper answers that id as it did (for the earlier run), and the
    stream of the new run waited for events that never come. Found by probing."""
    first = run_input(thread_id=f"rid-{uuid.uuid4().hex[:8]}")
    reused = {FORWARDED_BY: "http://elsewhere", REQUEST_ID: uuid.uuid4().hex}
    async with serving(kafka) as one:
        await settled([one])
        post = asyncio.create_task(one.http.post(f"/agents/{AGENT}", json=first,
                                                 headers=reused))
        request = await backstage.next_request()
        await backstage.decide(request)
        t, r = str(first["threadId"]), str(first["runId"])
        await backstage.emit(t, r, [started(t, r), finished(t, r)])
        assert (await post).status_code == 200
        second = run_input(thread_id=t)
        post = asyncio.create_task(one.http.post(f"/agents/{AGENT}", json=second,
                                                 headers=reused))
        again = await backstage.next_request()
        assert again.request_id == reused[REQUEST_ID]
        await backstage.decide(request)  # as the gatekeeper does: the first decision again
        response = await asyncio.wait_for(post, 30)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_header"
    assert r in response.json()["detail"]


Answer = Callable[[asyncio.StreamWriter], Awaitable[None]]
SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
FIRST = b'id: 1\ndata: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'


async def never_answers(writer: asyncio.StreamWriter) -> None:
    """Nothing at all (an instance whose HTTP side hangs while it stays in the group)."""


async def breaks_off(writer: asyncio.StreamWriter) -> None:
    """A stream's head and first event, then the connection closes mid-body (killed)."""
    writer.write(SSE_HEAD + b"%x\r\n%s\r\n" % (len(FIRST), FIRST))
    await writer.drain()
    writer.transport.abort()


async def falls_silent(writer: asyncio.StreamWriter) -> None:
    """A stream's head and first event, then nothing, not even a keep-alive (frozen)."""
    writer.write(SSE_HEAD + b"%x\r\n%s\r\n" % (len(FIRST), FIRST))
    await writer.drain()


@asynccontextmanager
async def silent_owner(kafka: KafkaSettings, answer: Answer = never_answers, **overrides: Any
                       ) -> AsyncIterator[tuple[Served, Served, list[asyncio.Event]]]:
    """Two instances, the second advertising a listener that plays an owner: it reads a
    request's head and ``answer`` s it; with the events set as each connection to it
    closes."""
    closed: list[asyncio.Event] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        event = asyncio.Event()
        closed.append(event)
        await reader.readuntil(b"\r\n\r\n")
        await answer(writer)
        with contextlib.suppress(OSError):
            while await reader.read(65536):  # returns at the caller's close
                pass
        event.set()
        writer.close()

    listener = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        async with serving(kafka, **overrides) as here, \
                serving(kafka, advertised_url=f"http://127.0.0.1:{port}", **overrides) as gone:
            async with asyncio.timeout(WAIT_S):
                while len(set(here.relay.fanout.ownership.owners)) != 2 or not all(
                        i.relay.fanout.ownership.settled.is_set() for i in (here, gone)):
                    await asyncio.sleep(0.05)
            yield here, gone, closed
    finally:
        listener.close()


def thread_of(instance: Served) -> str:
    return next(t for t in threads_on_every_partition(instance.relay.kafka, 1)
                if instance.relay.fanout.partition_of(t) in instance.relay.fanout.ownership.mine)


async def test_a_thread_read_through_an_owner_that_never_answers_ends_within_its_bound(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """A thread's state needs no decision: its forward waits for the owner's head a few
    keep-alive periods (``4 * AGUI_KEEPALIVE_S``), not the run's bound (decision, queue
    and keep-alives: 175 s on the defaults), then answers 503 owner_unavailable."""
    async with silent_owner(kafka, keepalive_s=0.5, forward_settle_s=1.0) as (here, gone, _):
        answer = await here.http.get(f"/threads/{thread_of(gone)}")
    assert (answer.status_code, answer.json()["code"]) == (503, "owner_unavailable")
    assert answer.headers["retry-after"]


async def test_a_client_leaving_while_its_forward_waits_closes_the_owners_connection(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """A hundred clients that left held a hundred connections to a silent owner (and their
    fds) for as long as the forward's bound; the forward now watches its client too."""
    async with silent_owner(kafka) as (here, gone, closed):
        async with httpx.AsyncClient(base_url=here.url, timeout=0.5) as http:
            with pytest.raises(httpx.ReadTimeout):  # the client gives up and leaves
                await http.get(f"/threads/{thread_of(gone)}")
        await until(lambda: bool(closed) and closed[0].is_set(),
                    "the connection to the owner stayed open after its client left")
        assert counter(here.relay, "agui_consumer_forwards_total", outcome="client_left") == 1



@pytest.mark.parametrize("answer", [breaks_off, falls_silent])
async def test_an_owner_that_breaks_off_or_falls_silent_mid_stream_breaks_the_clients_stream(
        kafka: KafkaSettings, backstage: Backstage, answer: Answer) -> None:
    """A forwarded stream whose owner was killed, or froze, mid-body ended for the client
    as a whole response (the chunked body's end written by this instance), and a frozen
    owner's silence lasted the run's 160 s bound: the client is now cut as a direct client
    of a dead owner is, after four keep-alive periods of silence at most."""
    async with silent_owner(kafka, answer, keepalive_s=0.5) as (here, gone, _):
        path = f"/threads/{thread_of(gone)}/runs/r/events"
        async with here.http.stream("GET", path) as response:
            assert response.status_code == 200
            pieces: list[bytes] = []
            with pytest.raises(httpx.RemoteProtocolError):
                await read_into(response, pieces)
    assert b"".join(pieces) == FIRST


async def test_a_forwarded_run_whose_owner_broke_off_is_not_cancelled(
        kafka: KafkaSettings, backstage: Backstage, caplog: pytest.LogCaptureFixture) -> None:
    """With ``AGUI_CANCEL_ON_DISCONNECT``, a forwarded POST whose owner died mid-stream
    was taken for its client leaving: this instance published a cancel of a run the
    client was about to continue with ``Last-Event-ID``. Its client did not leave. And
    the break-off, made on purpose, logged uvicorn's ERROR "ASGI callable returned
    without completing response" (an alert for every stream of a dead owner)."""
    async with silent_owner(kafka, breaks_off, keepalive_s=0.5,
                            cancel_on_disconnect=True) as (here, gone, _):
        body = run_input(thread_of(gone))
        async with here.http.stream("POST", f"/agents/{AGENT}", json=body) as response:
            assert response.status_code == 200
            pieces: list[bytes] = []
            with pytest.raises(httpx.RemoteProtocolError):
                await read_into(response, pieces)
        await asyncio.sleep(1.0)  # a cancel would be published by now
        cancels = await backstage.control_count()
    assert b"".join(pieces) == FIRST
    assert cancels == 0, "a cancel was published for a run whose owner broke off"
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [], errors


async def read_into(response: httpx.Response, pieces: list[bytes]) -> None:
    async for piece in response.aiter_raw():
        pieces.append(piece)


async def test_an_owner_advertising_this_instances_own_url_is_answered_at_once(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """Two instances sharing one AGUI_ADVERTISED_URL: a request for the other's partition
    was forwarded to this instance itself, refused there, and retried after the settle
    wait (15 s) before its 503. The misconfiguration is named, and the 503 is at once."""
    async with AsyncExitStack() as stack:
        here = await stack.enter_async_context(serving(kafka, forward_settle_s=60.0))
        twin = await stack.enter_async_context(
            serving(kafka, advertised_url=here.url, forward_settle_s=60.0))
        async with asyncio.timeout(WAIT_S):
            while not (here.relay.fanout.ownership.settled.is_set()
                       and len(twin.relay.fanout.ownership.mine) > 0
                       and here.relay.fanout.ownership.owners
                       == twin.relay.fanout.ownership.owners):
                await asyncio.sleep(0.05)
        answer = await here.http.get(f"/threads/{thread_of(twin)}")
    assert (answer.status_code, answer.json()["code"]) == (503, "owner_unavailable")
    assert "AGUI_ADVERTISED_URL" in answer.json()["detail"]
