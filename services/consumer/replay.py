"""Replay: the records of one run already on the ``events`` topic, and the route's answer.

A run's records all sit in its thread's partition (murmur2 of the threadId).
Where the scan starts is the one design choice here, and each choice bounds
what one request can make the instance read:

- the fan-out remembers, in a bounded LRU (``AGUI_REPLAY_INDEX_SIZE`` runs),
  the offset of each RUN_STARTED it routed: replaying any run started since
  this instance came up seeks straight to it;
- else, when the run's admission is known (a decision its thread remembers,
  its current run's start, or the admission this instance routed:
  ``lookback``), the scan begins at the first record written since then, by
  the records' timestamps;
- else (a run older than its thread's memory, or a runId no run ever had)
  the thread's partition is scanned from its beginning, bounded by the
  topic's retention (7 days) and nothing smaller. A persistent run index
  would be a topic of its own, not worth it for a recovery route; instead at
  most ``AGUI_REPLAY_FULL_SCANS`` such scans run at once on an instance, and
  one more is answered ``503 replay_busy`` with ``Retry-After``: a tenant
  asking for runIds at random can make the instance read its partitions,
  but never more of them at once than that, and live streams keep the rest.

Scans filter on the record key and the ``agui-run-id`` header without
decoding values, and stop at the partition's end offset taken when they
started; anything later reaches the client through the live stream.
A retried forward's POST (``runs.from_log``) scans too: its run cannot have
begun before its admission, nor before the first attempt was sent, so its
scan begins at the first record written since then (``since_ms``) whatever
the partition holds before; the headers that make a POST a retried one can
come from any client. So does a POST whose admission the gatekeeper
replays (a request sent again under its requestId: its run may be over),
from that admission. Records every scan reads are counted
(``agui_consumer_log_records_scanned``, by reason: ``replay``,
``replay_full``, ``retried_forward``, ``repeated_request``).

A reconnecting client sends the last sequence number it saw
(``Last-Event-ID``): the scan begins a few hundred numbers before it, where
a search over the partition's offsets finds them (``seek``: a few small
fetches, not the run again: a client reconnecting near the end of a run of a
million events had the instance read the million each time); ``first_after``
skips what the client has, and tells the route when the scan found nothing
after it but the run's terminal event at or before it — a finished run with
nothing left to send, answered ``204`` rather than a stream that could only
wait for events that will not come. A first record past what the client has
that is not the next one (``ordering.missing_before``: retention removed the
run's first records, or those right after ``Last-Event-ID``) is answered
``410 events_expired`` before any byte, naming what is gone and the first id
still there, never a 200 stream with a hole or one starting mid-run.

``replay`` is the whole of ``GET /threads/{id}/runs/{runId}/events`` once
the ids are checked: the ``Last-Event-ID``, readiness, the tenant's right
to the thread, then the stream — subscribed *before* the scan, so nothing
written between the scan's end and the live part is lost — or the 204 of a
finished run, or the 404 of a run that has nothing on the log and is not
running: neither the view nor the fan-out knows it, or it is over (the view
is past it, or the fan-out read its end) and its records are gone with
retention (the fan-out's memory of its admission had made such a replay
wait live for ever). ``opening`` is that choice, for a POST whose admission
was replayed too (``runs``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator

from prometheus_client import Counter
from starlette.responses import Response

from contracts import ThreadState
from services.consumer import lookback
from services.consumer.catchup import passed
from services.consumer.log_tail import BATCH, Turn, run_delivery
from services.consumer.ordering import TERMINAL_TYPES, missing_before, parse_last_event_id
from services.consumer.problems import Gone, InvalidInput, NotFound, Unavailable
from services.consumer.relay import Relay
from services.consumer.seek import Seek
from services.consumer.sse import StreamOutcome
from services.consumer.streams import Delivery, FanOut
from services.kafka.clients import AIOKafkaConsumer, TopicPartition, new_consumer
from services.kafka.partitioning import hashed_among, partition_for
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

TICK_S = 1.0
"""A long scan yields ``None`` at least this often, so the body can keep alive."""
PROBE = 64
"""Records one probe of a ``Last-Event-ID`` search fetches at a time."""


async def scan_run(kafka: KafkaSettings, fanout: FanOut, thread_id: str, run_id: str, *,
                   reason: str = "replay", since_ms: int | None = None,
                   full_scans: lookback.FullScans | None = None, wait: bool = False,
                   client: StreamOutcome | None = None, after: int | None = None,
                   ) -> AsyncGenerator[Delivery | None, None]:
    """Every record of the run up to the current end, in partition order.

    ``since_ms``: the run started no earlier than this (epoch ms), so where its start is
    not remembered the scan begins at the first record of that time, not at the
    partition's beginning. A scan from the beginning takes one of ``full_scans`` for its
    life (raising ``503 replay_busy`` on its first step when none is free) and counts as
    ``<reason>_full``. Every scan reads with one of the instance's log readers
    (``log_tail``), in turns as the streams behind the fan-out do: the first one waited
    for a moment, then ``503 replay_busy``, or, with ``wait`` (a response already
    begun), as long as it takes. Yields ``None`` now and then while scanning or waiting
    (a keep-alive tick). ``client``: the response the scan feeds (``log_tail.Turn``).
    ``after``: the client has every number up to this one (``Last-Event-ID``), so the scan
    begins where ``seek.Seek`` finds, not at the run's start; what it reads to find that
    counts as scanned too.
    """
    topic = kafka.topics.events
    count = hashed_among(kafka.partitions, fanout.partitions.get(topic) or kafka.partitions)
    tp = TopicPartition(topic, partition_for(thread_id, count))
    start = fanout.run_starts.get((thread_id, run_id))
    if start is not None and start[0] != tp.partition:
        start = None
    slot = full_scans if start is None and since_ms is None else None
    if slot is not None:
        slot.take()
        reason += "_full"
    readers = fanout.tail
    key = thread_id.encode("utf-8")
    scanned = fanout.metrics.log_records_scanned.labels(reason)
    end: int | None = None
    resume: int | None = None
    """Where the next turn starts reading (None: the first turn finds it)."""
    try:
        while True:
            if readers is not None:
                if wait or end is not None:
                    async for tick in readers.turn():
                        yield tick
                else:
                    await readers.take_soon()
            held = None if readers is None else Turn(readers, client)
            consumer = None
            try:
                consumer = new_consumer(kafka, "agui-consumer-replay", group_id=None,
                                        auto_offset_reset="earliest", max_poll_records=BATCH)
                if held is not None:
                    held.consumer = consumer
                await consumer.start()  # in the try: a client leaving now stops it too
                consumer.assign([tp])
                if end is None:
                    end = (await consumer.end_offsets([tp]))[tp]
                if resume is not None:
                    consumer.seek(tp, resume)
                else:
                    if start is not None:
                        consumer.seek(tp, start[1])
                    elif since_ms is not None:
                        found = (await consumer.offsets_for_times({tp: since_ms}))[tp]
                        consumer.seek(tp, end if found is None else found.offset)
                    else:
                        await consumer.seek_to_beginning(tp)
                    if after is not None:
                        search = Seek(await consumer.position(tp), end, after)
                        consumer.seek(tp, await seek_after(consumer, tp, search, key, run_id,
                                                           scanned))
                resume = None
                tick = time.monotonic()
                while resume is None and (at := await consumer.position(tp)) < end:
                    batch = await consumer.getmany(tp, timeout_ms=500, max_records=BATCH)
                    records = batch.get(tp, [])
                    if held is not None:
                        held.records = records
                    scanned.inc(len(records))
                    for record in records:
                        if record.offset >= end:
                            return
                        at = record.offset + 1
                        delivery = run_delivery(record, key, run_id)
                        if delivery is not None:
                            if held is not None:
                                held.park()
                            yield delivery
                            if held is not None and (held.step() or held.due()):
                                held.give_up()
                                resume = at
                                break
                    if resume is None and time.monotonic() - tick >= TICK_S:
                        tick = time.monotonic()
                        if held is not None:
                            held.park()
                        yield None
                        if held is not None and held.step():
                            held.give_up()
                            resume = at
            finally:  # shielded: a client leaving now must not leave the consumer open
                if held is not None:
                    held.records = held.consumer = None
                try:
                    if consumer is not None:
                        await asyncio.shield(consumer.stop())
                finally:  # released however the stop is left: a client hanging up once it
                    if held is not None:  # had the end cancelled the wait, and the reader
                        held.release()  # was never given back (all 64 in 4 min, found by soak)
            if resume is None:
                return
    finally:
        if slot is not None:
            slot.give()


async def seek_after(consumer: AIOKafkaConsumer, tp: TopicPartition, search: Seek, key: bytes,
                     run_id: str, scanned: Counter) -> int:
    """Run ``search`` on the partition: one small fetch per probe; where to read from."""
    while (offset := search.probe()) is not None:
        consumer.seek(tp, offset)
        batch = await consumer.getmany(tp, timeout_ms=500, max_records=PROBE)
        records = batch.get(tp, [])
        scanned.inc(len(records))
        run = [(d.offset, d.seq) for record in records
               if (d := run_delivery(record, key, run_id)) is not None]
        search.saw(run, await consumer.position(tp))
    return search.start


async def first_after(scan: AsyncIterator[Delivery | None],
                      after: int | None) -> tuple[Delivery | None, bool]:
    """Advance ``scan`` to its first record past ``after`` (skipping ticks).

    Returns that record (None when the scan has none) and whether a
    terminal event at or before ``after`` went by: the run has ended and the
    client has seen its end.
    """
    ended = False
    async for item in scan:
        if item is None:
            continue
        if after is None or item.seq > after:
            return item, ended
        ended = ended or item.event_type in TERMINAL_TYPES
    return None, ended


async def prefixed(first: Delivery, rest: AsyncGenerator[Delivery | None, None]
                   ) -> AsyncIterator[Delivery | None]:
    """``first`` followed by the rest of the scan, closed with this (its reader and its
    full-scan slot go when the body does, not when the collector gets to them)."""
    try:
        yield first
        async for item in rest:
            yield item
    finally:
        await rest.aclose()


class NothingLeft(Exception):  # noqa: N818 - an answer: 204
    """The run ended at or before what the client has: nothing is left to send."""


def over(fanout: FanOut, state: ThreadState | None, thread_id: str, run_id: str) -> bool:
    """Whether the run is not running any more: this instance read its end, or the thread
    view is past it (``catchup.passed``). Asked before a scan, it means every record the
    run wrote is before the scan's end: a scan that finds none finds what the log has."""
    return (thread_id, run_id) in fanout.ended or passed(state, run_id)


async def opening(scan: AsyncGenerator[Delivery | None, None], after: int | None, *,
                  live: bool, thread_id: str, run_id: str) -> AsyncIterator[Delivery | None] | None:
    """What the log has of the run past ``after``, as its stream's preface; None when it
    has nothing and the run may still write (``live``: the stream waits for it). Nothing
    left but an end the client has seen raises ``NothingLeft`` (``204``); nothing of a run
    not live (over, its records gone with retention, or never known) the 404: a stream
    would wait for events that will not come. A first record that is not the next one
    raises the 410 (``expired``). The scan is closed unless returned."""
    try:
        first, ended = await first_after(scan, after)
    except BaseException:
        await scan.aclose()
        raise
    gone = None if first is None else missing_before(after, first.seq)
    if first is not None and gone is None:
        return prefixed(first, scan)
    await scan.aclose()
    if gone is not None:
        raise expired(thread_id, run_id, gone)
    if ended:
        raise NothingLeft
    if not live:
        raise NotFound("unknown_run", f"thread {thread_id!r} has no run {run_id!r} on the "
                       "log: it is not running, and any records it had are gone")
    return None


def expired(thread_id: str, run_id: str, gone: range) -> Gone:
    """The 410 of a replay whose next events (``gone``) retention removed from the log."""
    return Gone("events_expired",
                f"events {gone.start}..{gone.stop - 1} of run {run_id!r} of thread "
                f"{thread_id!r} are no longer on the log (retention removed them); "
                f"{gone.stop} onwards remain: Last-Event-ID {gone.stop - 1} reads them",
                extra={"firstAvailableId": gone.stop})


async def replay(relay: Relay, thread_id: str, run_id: str, principal: str,
                 last_event_id: str | None) -> Response:
    """The replay route's response (its problems raised, for ``direct`` to render)."""
    try:
        after = parse_last_event_id(last_event_id)
    except ValueError:
        raise InvalidInput("invalid_header", "Last-Event-ID must be a sequence number") from None
    if not relay.fanout.ready.is_set():
        raise Unavailable("not_ready", "the service is still connecting to Kafka")
    admitted = await relay.fanout.decided((thread_id, run_id), relay.tenancy.settle_s)
    state = await relay.tenancy.readable(thread_id, principal, run_id)
    if state is None and not admitted and relay.threads.caught_up.is_set():
        raise NotFound("unknown_thread", f"no thread {thread_id!r} is known")
    routed = relay.fanout.admitted.get((thread_id, run_id))
    admitted_ms = lookback.admitted_ms(state, run_id, routed)
    since = None if admitted_ms is None else lookback.since_ms(admitted_ms / 1000)
    # a run admitted here but over (its records gone) is not waited for live
    live = not over(relay.fanout, state, thread_id, run_id) and (
        admitted or (state is not None and state.status == "running"
                     and state.run_id == run_id))
    stream = relay.fanout.subscribe(thread_id, run_id)
    outcome = StreamOutcome()
    scan = scan_run(relay.kafka, relay.fanout, thread_id, run_id, since_ms=since,
                    full_scans=relay.full_scans, client=outcome, after=after)
    try:
        preface = await opening(scan, after, live=live, thread_id=thread_id, run_id=run_id)
    except NothingLeft:
        relay.fanout.unsubscribe(stream)
        return Response(status_code=204)
    except BaseException:
        relay.fanout.unsubscribe(stream)
        raise
    return relay.runs.respond(stream, "replay", after=after, preface=preface,
                              owns_run=False, outcome=outcome)
