"""Headers no relay writer makes: null values, and names that are not UTF-8.

Kafka's record format gives a header's name as bytes and lets its value be
null (length -1); the broker stores either as given, and any client can
write them (the Java client writes null values; librdkafka, or anyone
writing raw batches, names in any bytes). Every topic a service reads —
``requests``, ``runs``, ``events``, ``dispatch.scripted`` and
``decisions`` — gets such records on one partition: a record with each of
the relay's header names (and a foreign one) null, a stray event of a real
run (its run id set, every other header null), and a batch of three
records whose middle one carries a header named in bytes that are not
UTF-8 (aiokafka used to raise on that batch at every poll, for ever). And
each topic gets the same records compressed with every codec Kafka has
(gzip, snappy, lz4, zstd), as a Java producer configured for it writes
them: aiokafka reads the last three only with ``cramjam`` installed, and
without it raised on them at every poll too.
Afterwards each request is decided or dead-lettered, the run's replay and
its thread's view still answer 200, a normal approval flow on the same
partition completes, and every service process is the one first started
(``test_afterwards`` then finds no traceback in any log).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from contracts.headers import (
    AGENT,
    EVENT_TYPE,
    RUN_ID,
    SCHEMA,
    SEQ,
    TRACEPARENT,
    EventHeaders,
)
from hostile.client import Tenant, approval_flow
from hostile.stack import UpStack
from hostile.topics import answer_to, envelope, publish, publish_not_utf8, thread_on
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.hostile

PARTITION = 6
NAMES = (RUN_ID, EVENT_TYPE, AGENT, SEQ, SCHEMA, TRACEPARENT, "x-hostile")
NULLS: list[tuple[str, Any]] = [(name, None) for name in NAMES]
"""Every header the relay reads, null (and one it does not)."""


def poison(settings: KafkaSettings, topic: str, thread: str) -> tuple[str, bytes]:
    """A plausible value for ``topic`` on ``thread``: the topic and the value's bytes."""
    topics = settings.topics
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    ended = {"type": "RUN_FINISHED", "threadId": thread, "runId": run_id}
    request = envelope({"threadId": thread, "runId": run_id, "state": {}, "messages": [],
                        "tools": [], "context": [], "forwardedProps": {}})
    now = datetime.now(UTC).isoformat()
    values: dict[str, tuple[str, dict[str, Any]]] = {
        "requests": (topics.requests, request),
        "runs": (topics.runs, ended),
        "events": (topics.events, ended),
        "dispatch": (topics.dispatch("scripted"), {**request, "decidedAt": now}),
        "decisions": (topics.decisions, {
            "schemaVersion": 1, "requestId": request["requestId"], "threadId": thread,
            "runId": run_id, "agent": "scripted", "verdict": "admitted", "message": "admitted",
            "decidedAt": now}),
    }
    name, value = values[topic]
    return name, orjson.dumps(value)


@pytest.mark.parametrize("topic", ["requests", "runs", "events", "dispatch", "decisions"])
async def test_null_header_values_on_a_topic_harm_no_service(
        relay: UpStack, tenant_a: Tenant, topic: str) -> None:
    settings = relay.settings
    thread = thread_on(PARTITION, settings.partitions, f"null-{topic}")
    name, value = poison(settings, topic, thread)
    where = await publish(settings, name, thread.encode(), value, NULLS)
    assert where[0] == PARTITION
    await approval_flow(tenant_a, thread_on(PARTITION, settings.partitions, f"after-null-{topic}"))
    if topic == "requests":
        answer = await answer_to(settings, orjson.loads(value)["requestId"], where, 10.0)
        assert answer is not None, f"requests p{where[0]}@{where[1]}: no decision, no dead letter"
    relay.check_alive()


@pytest.mark.parametrize("topic", ["requests", "runs", "events", "dispatch", "decisions"])
async def test_a_header_name_not_utf8_on_a_topic_stops_no_reader(
        relay: UpStack, tenant_a: Tenant, topic: str) -> None:
    settings = relay.settings
    threads = [thread_on(PARTITION, settings.partitions, f"utf8-{topic}-{i}") for i in range(3)]
    poisons = [poison(settings, topic, thread) for thread in threads]
    name = poisons[0][0]
    first = await publish_not_utf8(settings, name, PARTITION,
                                   [(t.encode(), value) for t, (_, value) in zip(threads, poisons,
                                                                                strict=True)],
                                   bad=1)
    await approval_flow(tenant_a, thread_on(PARTITION, settings.partitions, f"after-utf8-{topic}"))
    if topic == "requests":  # the records around the odd one, and it, are each answered
        for i, (_, value) in enumerate(poisons):
            where = (PARTITION, first + i)
            answer = await answer_to(settings, orjson.loads(value)["requestId"], where, 10.0)
            assert answer is not None, f"requests p{where[0]}@{where[1]}: no answer"
    relay.check_alive()


CODECS = ("gzip", "snappy", "lz4", "zstd")


@pytest.mark.parametrize("topic", ["requests", "runs", "events", "dispatch", "decisions"])
async def test_records_compressed_with_any_codec_are_read(
        relay: UpStack, tenant_a: Tenant, topic: str) -> None:
    settings = relay.settings
    sent = []
    for codec in CODECS:
        thread = thread_on(PARTITION, settings.partitions, f"{codec}-{topic}")
        name, value = poison(settings, topic, thread)
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers,
                                    compression_type=codec, acks="all")
        await producer.start()
        try:
            done = await (await producer.send(name, value, key=thread.encode()))
        finally:
            await producer.stop()
        assert done.partition == PARTITION
        sent.append((value, (done.partition, done.offset)))
    await approval_flow(tenant_a, thread_on(PARTITION, settings.partitions, f"after-z-{topic}"))
    if topic == "requests":
        for value, where in sent:
            answer = await answer_to(settings, orjson.loads(value)["requestId"], where, 10.0)
            assert answer is not None, f"requests p{where[0]}@{where[1]}: no answer"
    relay.check_alive()


@pytest.mark.parametrize("topic", ["requests", "runs", "events", "dispatch", "decisions"])
async def test_a_tombstone_with_every_header_set_harms_no_service(
        relay: UpStack, tenant_a: Tenant, topic: str) -> None:
    """No value at all (a tombstone), behind headers that say it is an event of a run."""
    settings = relay.settings
    thread = thread_on(PARTITION, settings.partitions, f"tomb-{topic}")
    name, _ = poison(settings, topic, thread)
    headers = EventHeaders(f"r-{thread}", "RUN_FINISHED", "scripted", 0).encode()
    await publish(settings, name, thread.encode(), None, headers)
    await approval_flow(tenant_a, thread_on(PARTITION, settings.partitions, f"after-tomb-{topic}"))
    relay.check_alive()



@pytest.mark.parametrize("stray", ["null headers", "tombstone"])
async def test_a_runs_stray_record_leaves_its_replay_and_view_whole(
        relay: UpStack, tenant_a: Tenant, stray: str) -> None:
    """A record on a finished run's thread, with its run id: every other header null, or
    no value behind a full set of headers (a sequence number the run has)."""
    settings = relay.settings
    thread = thread_on(PARTITION, settings.partitions, f"stray-{stray[:4]}")
    await approval_flow(tenant_a, thread)
    run_id = f"{thread}-r2"
    if stray == "tombstone":
        value, headers = None, EventHeaders(run_id, "TEXT_MESSAGE_CONTENT", "approval",
                                            2).encode()
    else:
        value = orjson.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"})
        headers = [(RUN_ID, run_id.encode()), *NULLS[1:]]
    await publish(settings, settings.topics.events, thread.encode(), value, headers)
    replay = await tenant_a.get(f"/threads/{thread}/runs/{run_id}/events",
                                headers={"accept": "text/event-stream"})
    assert replay.status_code == 200, replay.text[:400]
    frames = [line for line in replay.text.splitlines() if line.startswith("data: ")]
    assert orjson.loads(frames[-1][6:])["type"] == "RUN_FINISHED", frames[-3:]
    assert all('"delta":"x"' not in f for f in frames), "the stray event was relayed"
    view = await tenant_a.get(f"/threads/{thread}")
    assert view.status_code == 200, view.text[:400]
    assert view.json()["status"] == "idle", view.json()
    relay.check_alive()


async def test_a_superscript_sequence_number_neither_cuts_a_replay_nor_is_relayed(
        relay: UpStack, tenant_a: Tenant) -> None:
    """``agui-seq: ²`` (``str.isdigit`` takes it, ``int`` refuses it) on a stray record of
    a run cut every replay of that run before its end, with a 500, for every retry (found
    by probing); the query parameter the same way: ``/interrupts?limit=²`` was a 500."""
    settings = relay.settings
    thread = thread_on(PARTITION, settings.partitions, "seq-sup")
    await approval_flow(tenant_a, thread)
    run_id = f"{thread}-r2"
    headers = [(k, "²".encode() if k == SEQ else v)
               for k, v in EventHeaders(run_id, "CUSTOM", "approval", 1).encode()]
    await publish(settings, settings.topics.events, thread.encode(),
                  orjson.dumps({"type": "CUSTOM", "name": "stray", "value": 1}), headers)
    replay = await tenant_a.get(f"/threads/{thread}/runs/{run_id}/events",
                                headers={"accept": "text/event-stream"})
    assert replay.status_code == 200, replay.text[:400]
    frames = [orjson.loads(line[6:]) for line in replay.text.splitlines()
              if line.startswith("data: ")]
    assert frames[-1]["type"] == "RUN_FINISHED", [f["type"] for f in frames]
    assert all(f.get("name") != "stray" for f in frames)
    limit = await tenant_a.get("/interrupts", params={"limit": "²"})
    assert limit.status_code == 400, limit.text[:300]
    relay.check_alive()
