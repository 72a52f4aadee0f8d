"""Replays and a thread's audit while the broker is down: a clear 503, the connection kept.

Two consumer-service instances (they own partitions and forward), a gatekeeper
and a worker on a broker of the test's own. A run ends; the broker stops. Then
``GET /threads/{id}/runs/{run}/events`` (with and without ``Last-Event-ID``) and
``GET /threads/{id}/audit``, on the owner and through the other instance, were
answered ``500 internal_error`` at once, with a traceback (each opens a Kafka
consumer whose ``start()`` raised ``KafkaConnectionError``), and the owner then
dropped the keep-alive connection without ``Connection: close``: the client's
next request on it failed with a transport error (found by probing). Now each is
``503 broker_unavailable`` with ``Retry-After``, as a POST or a cancel is, and the
connection serves the next request.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest

from faults.harness import Stack, StackConfig, unique_prefix
from faults.load import run_input
from faults.outages import OwnBroker
from services.kafka.partitioning import partition_for

pytestmark = pytest.mark.faults

async def owner_of(http: httpx.AsyncClient, urls: list[str], partition: int) -> int:
    """Index of the instance whose fan-out reads ``partition`` of events."""
    needle = f'partition="{partition}",topic='
    for i, url in enumerate(urls):
        text = (await http.get(f"{url}/metrics")).text
        if any("fanout" in line and needle in line and "events" in line
               for line in text.splitlines()):
            return i
    raise AssertionError(f"no instance owns partition {partition}")


async def kept_alive(url: str, path: str) -> str:
    """Send ``path`` then ``/healthz`` on one HTTP/1.1 connection; what the second got."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        head = f"GET {{}} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n"
        writer.write(head.format(path).encode())
        await writer.drain()
        status = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in status.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        if b"connection: close" in status.lower():
            return "closed as announced"
        writer.write(head.format("/healthz").encode())
        await writer.drain()
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
        except (ConnectionError, TimeoutError) as exc:
            return f"{type(exc).__name__} on the kept-alive connection"
        return line.decode().strip() or "connection closed without an answer"
    finally:
        writer.close()


async def test_replays_and_audits_while_the_broker_is_down_are_a_503_that_keeps_the_connection(
        own_broker: OwnBroker, tmp_path: Path) -> None:
    config = StackConfig(partitions=2, consumers=2)
    async with Stack(own_broker.bootstrap, unique_prefix("or"), tmp_path, config) as stack, \
            httpx.AsyncClient(timeout=30.0) as http:
        urls = stack.consumer_urls
        await asyncio.sleep(2.0)  # the group settled
        thread_id = f"or-{uuid.uuid4().hex[:10]}"
        run_id = f"{thread_id}-r1"
        owner = await owner_of(http, urls, partition_for(thread_id, config.partitions))
        other = 1 - owner
        done = await http.post(f"{urls[owner]}/agents/scripted",
                               json=run_input(thread_id, run_id, script={"text": "hello"}),
                               headers={"accept": "text/event-stream"})
        assert done.status_code == 200, done.text
        assert "RUN_FINISHED" in done.text, done.text

        await own_broker.stop()
        answers: dict[str, tuple[int, str | None, str]] = {}
        routes = {
            "replay": (f"/threads/{thread_id}/runs/{run_id}/events", {}),
            "replay Last-Event-ID": (f"/threads/{thread_id}/runs/{run_id}/events",
                                     {"last-event-id": "1"}),
            "audit": (f"/threads/{thread_id}/audit", {}),
        }
        for where, url in (("owner", urls[owner]), ("non-owner", urls[other])):
            for name, (path, headers) in routes.items():
                async with httpx.AsyncClient(timeout=30.0) as one:
                    r = await one.get(url + path, headers={"accept": "text/event-stream",
                                                           **headers})
                    code = r.json().get("code") if r.headers.get(
                        "content-type", "").startswith("application/problem") else None
                    answers[f"{name} via {where}"] = (r.status_code,
                                                      r.headers.get("retry-after"), str(code))
        # the same keep-alive connection, after a replay answered during the outage
        follow = await kept_alive(urls[owner], routes["replay"][0])
        await own_broker.start_again()
        await stack.probe(90.0)
    assert set(answers.values()) == {(503, "5", "broker_unavailable")}, (
        f"answered during the outage: {answers}; next request on the same "
        f"connection: {follow}")
    assert follow.startswith("HTTP/1.1 200") or follow == "closed as announced", follow
