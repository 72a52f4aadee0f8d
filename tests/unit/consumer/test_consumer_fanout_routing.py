"""The fan-out's routing of event records: what each stream gets, in one pass per batch.

Runs interleave within a partition's batch, headers come in the order a
worker writes them or in any other (the first of each name wins), records
that are no run's event are passed over, and a run's deliveries reach its
streams as one list. Generated batches check all of it against a plain
record-at-a-time model; a full buffer leaves the rest to the log (a stream
with a log reader) or drops the stream (one without), as one push per record
would.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.headers import AGENT, EVENT_TYPE, RUN_ID, SEQ, EventHeaders, header_value
from services.consumer.log_tail import LogTail
from services.consumer.metrics import ConsumerMetrics
from services.consumer.streams import Delivery, FanOut, RunStream
from services.kafka.clients import ConsumerRecord, TopicPartition
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

KAFKA = KafkaSettings(bootstrap_servers="127.0.0.1:9", topic_prefix="unit")
EVENTS = TopicPartition(KAFKA.topics.events, 0)
Headers = list[tuple[str, bytes | None]]


def fanout(stream_queue: int = 1_000) -> FanOut:
    return FanOut(KAFKA, ConsumerMetrics(), max_streams=8, stream_queue=stream_queue,
                  index_size=64)


def record(offset: int, thread: str | None, headers: Headers,
           value: bytes | None = b"{}") -> ConsumerRecord[bytes, bytes]:
    key = thread.encode() if thread is not None else None
    return ConsumerRecord(EVENTS.topic, 0, offset, 0, 0, key, value, None,
                          len(key or b""), len(value or b""), headers)


def event(offset: int, thread: str, run: str, seq: int,
          kind: str = "TEXT_MESSAGE_CONTENT") -> ConsumerRecord[bytes, bytes]:
    headers: Headers = list(EventHeaders(run, kind, "agent", seq).encode())
    return record(offset, thread, headers, b'{"n":%d}' % offset)


def buffered(stream: RunStream) -> list[Delivery]:
    return stream.buffer.take_all()


def test_interleaved_runs_each_get_their_own_events_in_order() -> None:
    routes = fanout()
    a, b = routes.subscribe("t1", "r1"), routes.subscribe("t2", "r1")  # same runId, two threads
    batch = [event(10, "t1", "r1", 0, "RUN_STARTED"), event(11, "t1", "r1", 1),
             event(12, "t2", "r1", 0, "RUN_STARTED"), event(13, "t1", "r1", 2),
             event(14, "t3", "r9", 0), event(15, "t2", "r1", 1, "RUN_FINISHED")]
    routes._route({EVENTS: batch})
    assert [(d.seq, d.offset) for d in buffered(a)] == [(0, 10), (1, 11), (2, 13)]
    assert [(d.seq, d.event_type, d.value, d.offset) for d in buffered(b)] == [
        (0, "RUN_STARTED", b'{"n":12}', 12), (1, "RUN_FINISHED", b'{"n":15}', 15)]
    # what is remembered of every run read, streamed or not
    assert routes.run_starts.get(("t1", "r1")) == (0, 10)
    assert routes.run_starts.get(("t3", "r9")) == (0, 14)
    ended = routes.ended.get(("t2", "r1"))
    assert ended is not None
    assert (ended.event_type, ended.offset) == ("RUN_FINISHED", 15)
    assert ("t1", "r1") not in routes.ended


def test_headers_in_any_order_or_repeated_are_read_as_header_value_reads_them() -> None:
    routes = fanout()
    stream = routes.subscribe("t1", "r1")
    shuffled: Headers = [(SEQ, b"0"), (AGENT, b"a"), (EVENT_TYPE, b"RUN_STARTED"),
                         (RUN_ID, b"r1")]
    repeated: Headers = [(RUN_ID, b"r1"), (RUN_ID, b"r2"), (EVENT_TYPE, b"X"), (SEQ, b"1"),
                         (SEQ, b"9")]
    routes._route({EVENTS: [record(1, "t1", shuffled), record(2, "t1", repeated)]})
    assert [(d.seq, d.event_type) for d in buffered(stream)] == [(0, "RUN_STARTED"), (1, "X")]


def test_records_that_are_no_runs_event_are_passed_over() -> None:
    routes = fanout()
    stream = routes.subscribe("t1", "r1")
    good: Headers = list(EventHeaders("r1", "TEXT_MESSAGE_CONTENT", "a", 0).encode())
    routes._route({EVENTS: [
        record(1, "t1", [(EVENT_TYPE, b"RUN_STARTED"), (SEQ, b"0")]),  # no runId
        record(2, "t1", [(RUN_ID, b"r1"), (EVENT_TYPE, b"RUN_STARTED")]),  # no seq
        record(3, None, good),  # no key
        record(4, "t1", good, value=None),  # a tombstone
        record(5, "t1", [(RUN_ID, b"r1"), (EVENT_TYPE, b"X"), (AGENT, b"a"), (SEQ, b"x")]),
        record(6, "t1", [(RUN_ID, None), (EVENT_TYPE, b"X"), (AGENT, b"a"), (SEQ, b"1")]),
        record(7, "t1", good),
    ]})
    assert [d.offset for d in buffered(stream)] == [7]


def test_a_full_buffer_leaves_the_rest_to_the_log_from_the_first_it_could_not_take() -> None:
    routes = fanout(stream_queue=3)
    routes.tail = LogTail(KAFKA, ConsumerMetrics(), readers=1)
    stream = routes.subscribe("t1", "r1")
    routes._route({EVENTS: [event(20 + i, "t1", "r1", i) for i in range(5)]})
    assert [d.offset for d in buffered(stream)] == [20, 21, 22]
    assert (stream.lag.behind, stream.lag.resume_at, stream.lag.routed) == (True, 23, 24)
    routes._route({EVENTS: [event(30, "t1", "r1", 5)]})  # while behind: only noted
    assert len(stream.buffer) == 0
    assert stream.lag.routed == 30
    assert not stream.dropped


def test_without_a_log_a_full_buffer_drops_that_stream_only() -> None:
    routes = fanout(stream_queue=2)
    slow, other = routes.subscribe("t1", "r1"), routes.subscribe("t2", "r2")
    routes._route({EVENTS: [event(1, "t1", "r1", 0), event(2, "t1", "r1", 1),
                            event(3, "t1", "r1", 2), event(4, "t2", "r2", 0)]})
    assert slow.dropped
    assert [d.offset for d in buffered(slow)] == [1, 2]
    assert [d.offset for d in buffered(other)] == [4]
    routes._route({EVENTS: [event(5, "t1", "r1", 3)]})  # unsubscribed: nothing more
    assert len(slow.buffer) == 0


def model(batch: list[ConsumerRecord[bytes, bytes]], key: tuple[str, str]) -> list[tuple[int, int]]:
    """One record at a time, by ``header_value``: the (seq, offset) a stream of ``key`` gets."""
    out = []
    for r in batch:
        run, seq = header_value(r.headers, RUN_ID), header_value(r.headers, SEQ)
        if r.key is None or r.value is None or run is None or seq is None:
            continue
        if (r.key.decode(), run) == key and seq.isdigit():
            out.append((int(seq), r.offset))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["t1", "t2"]), st.sampled_from(["r1", "r2"]),
                          st.booleans()), max_size=40),
       st.randoms(use_true_random=False))
def test_any_batch_routes_as_the_record_at_a_time_model(
        picks: list[tuple[str, str, bool]], rng: random.Random) -> None:
    routes = fanout()
    keys = [("t1", "r1"), ("t1", "r2"), ("t2", "r1")]
    streams = {k: routes.subscribe(*k) for k in keys}
    batch = []
    for offset, (thread, run, shuffle) in enumerate(picks):
        r = event(offset, thread, run, offset)
        if shuffle:
            rng.shuffle(r.headers)
        batch.append(r)
    routes._route({EVENTS: batch})
    for k, stream in streams.items():
        assert [(d.seq, d.offset) for d in buffered(stream)] == model(batch, k)
