"""Slow clients on the real broker: never cut for being slow, cut only for reading nothing.

A client that falls a full queue (``AGUI_STREAM_QUEUE``, 16 here) behind
its run goes on from the events topic at its own pace and rejoins the live
fan-out when it has caught up; across both switches it gets every event
once, in order, up to the terminal one, while no stream ever buffers more
than its queue. A client that reads nothing for ``AGUI_STREAM_IDLE_S`` is
disconnected, and continues through the replay route with
``Last-Event-ID``. Past ``AGUI_STREAM_LOG_READERS``, streams behind wait for
a reader and are all served in the end.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest
from consumer_harness import Backstage, finished, serving
from slow_sse import (
    WAIT_S,
    BufferPeak,
    SseReader,
    counter,
    emit_pads,
    open_run,
    slow_http,
    until,
)

from services.consumer.forward import FORWARDED_BY
from services.consumer.relay import Relay
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

QUEUE = 16
PAD = 4096
HALF = 1500
"""Events of 4 KiB per burst: 6 MB, more than the sockets between server and client hold."""


def sample(relay: Relay, name: str, **labels: str) -> float:
    return counter(relay, f"agui_consumer_{name}", **labels)


async def test_a_slow_client_gets_every_event_once_in_order_through_the_log_and_back(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, stream_queue=QUEUE) as app, slow_http(app.url) as http:
        relay = app.relay
        async with BufferPeak(relay) as peak:
            thread_id, run_id, reader = await open_run(http, backstage)
            # the client reads nothing while a burst is written: it falls behind
            await emit_pads(backstage, thread_id, run_id, 1, HALF, PAD)
            await until(lambda: sample(relay, "streams_to_log_total") >= 1, "never behind")
            # it reads as fast as it can: from the log, then back on the fan-out
            await reader.read_until(HALF)
            await until(lambda: sample(relay, "streams_rejoined_total") >= 1, "never rejoined")
            # a second burst while it pauses again, then the end, read at a trickle
            await emit_pads(backstage, thread_id, run_id, HALF + 1, HALF, PAD)
            await until(lambda: sample(relay, "streams_to_log_total") >= 2, "not behind again")
            await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)],
                                 seqs=[2 * HALF + 1])
            await reader.read_to_end(pause_s=0.0005)
            await reader.response.aclose()
            await until(lambda: relay.fanout.stream_count == 0, "a stream stayed open")
        tail = relay.fanout.tail
        assert tail is not None
        assert tail.active == 0
        assert sample(relay, "stream_log_readers") == 0
        dropped = sample(relay, "streams_dropped_total", reason="slow_client")
        assert sample(relay, "streams_open") == 0
    ids = [seq for seq, _ in reader.frames]
    assert ids == list(range(2 * HALF + 2)), "a gap, a repeat or a reordering"
    assert reader.frames[0][1] == "RUN_STARTED"
    assert reader.frames[-1][1] == "RUN_FINISHED"
    assert not reader.cut
    assert peak.peak <= QUEUE
    assert dropped == 0


async def test_a_client_that_reads_nothing_is_disconnected_and_continues_by_replay(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    # cancel_on_disconnect: a client that went away cancels its run, one cut idle does not
    async with serving(kafka, stream_queue=QUEUE, stream_idle_s=1.0,
                       cancel_on_disconnect=True) as app, slow_http(app.url) as http:
        relay = app.relay
        thread_id, run_id, reader = await open_run(http, backstage)
        await emit_pads(backstage, thread_id, run_id, 1, 2 * HALF, PAD)
        await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)],
                             seqs=[2 * HALF + 1])
        await until(lambda: sample(relay, "streams_idle_closed_total") >= 1, "never closed")
        await until(lambda: relay.fanout.stream_count == 0, "the stream stayed open")
        await reader.read_to_end()  # what the sockets still held, then the close
        assert reader.frames, "not even the first event came"
        assert reader.frames[-1][1] != "RUN_FINISHED", "the stream was not cut"
        last = reader.last_id
        async with app.http.stream("GET", f"/threads/{thread_id}/runs/{run_id}/events",
                                   headers={"Last-Event-ID": str(last)}) as response:
            assert response.status_code == 200
            rest = SseReader(response)
            await rest.read_to_end()
        cancels = sample(relay, "cancels_total", origin="disconnect")
        tail = relay.fanout.tail
        assert tail is not None
        assert tail.active == 0
    ids = [seq for seq, _ in reader.frames + rest.frames]
    assert ids == list(range(2 * HALF + 2))
    assert rest.frames[-1][1] == "RUN_FINISHED"
    assert cancels == 0
    assert await backstage.control_count() == 0


async def test_many_slow_clients_past_the_reader_limit_wait_their_turn_and_all_finish(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    clients, readers = 5, 2
    async with serving(kafka, stream_queue=QUEUE, stream_log_readers=readers) as app, \
            slow_http(app.url) as http:
        relay = app.relay
        async with BufferPeak(relay) as peak:
            runs = [await open_run(http, backstage) for _ in range(clients)]
            await asyncio.gather(*(emit_pads(backstage, t, r, 1, HALF, PAD)
                                   for t, r, _ in runs))
            for t, r, _ in runs:
                await backstage.emit(t, r, [finished(t, r)], seqs=[HALF + 1])
            await until(lambda: sample(relay, "streams_to_log_total") >= clients,
                        "not every client fell behind")
            await asyncio.gather(*(reader.read_to_end() for _, _, reader in runs))
            for _, _, reader in runs:
                await reader.response.aclose()
            await until(lambda: relay.fanout.stream_count == 0, "a stream stayed open")
        tail = relay.fanout.tail
        assert tail is not None
        assert tail.peak == readers, "the log readers were not all used, or more were"
        assert tail.active == 0
        assert sample(relay, "stream_log_waiting") == 0
    assert peak.waiting_peak >= 1, "no stream ever waited for a reader"
    assert peak.peak <= QUEUE
    for _, _, reader in runs:
        assert [seq for seq, _ in reader.frames] == list(range(HALF + 2))
        assert reader.frames[-1][1] == "RUN_FINISHED"


async def test_a_forwarded_stream_is_left_to_the_forwarding_instance_to_cut(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """The instance that forwarded a request reads the owner's answer only as fast as its
    own client takes it, in bursts, and watches that client with the same limit: the
    owner cut such a slow client's forward for idleness in between (found by probing).
    Here a forwarded request reads nothing for two limits (the longest the forwarding
    instance waits before it cuts its own client), then everything."""
    async with serving(kafka, stream_queue=QUEUE, stream_idle_s=1.0) as app, \
            slow_http(app.url) as http:
        relay = app.relay
        await until(lambda: relay.fanout.ownership.settled.is_set(), "never settled")
        http.headers[FORWARDED_BY] = "http://elsewhere"
        thread_id, run_id, reader = await open_run(http, backstage)
        await emit_pads(backstage, thread_id, run_id, 1, 2 * HALF, PAD)
        await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)],
                             seqs=[2 * HALF + 1])
        await asyncio.sleep(2.0)  # two idle limits of reading nothing
        await reader.read_to_end()
        idle_closed = sample(relay, "streams_idle_closed_total")
    assert idle_closed == 0
    assert not reader.cut
    assert [seq for seq, _ in reader.frames] == list(range(2 * HALF + 2))


async def test_replays_by_clients_that_read_nothing_take_no_more_than_the_log_readers(
        kafka: KafkaSettings, backstage: Backstage, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each replay read the run with a Kafka consumer of its own, at its client's pace, and
    nothing bounded them: 300 replays by clients that read nothing held 151 broker
    connections and 890 MB, and froze the instance for everyone (found by probing). A
    replay's scan now takes one of the ``AGUI_STREAM_LOG_READERS`` or is answered ``503
    replay_busy`` with ``Retry-After``."""
    import services.consumer.replay as replay_module

    readers, replays = 4, 24
    opened = {"now": 0, "peak": 0}
    real = replay_module.new_consumer

    def counting(*args: Any, **kwargs: Any) -> Any:
        consumer = real(*args, **kwargs)
        start, stop = consumer.start, consumer.stop

        async def started() -> None:
            await start()
            opened["now"] += 1
            opened["peak"] = max(opened["peak"], opened["now"])

        async def stopped() -> None:
            opened["now"] -= 1
            await stop()

        consumer.start, consumer.stop = started, stopped
        return consumer

    monkeypatch.setattr(replay_module, "new_consumer", counting)
    async with serving(kafka, stream_log_readers=readers) as app, \
            slow_http(app.url) as http:
        thread_id, run_id, reader = await open_run(http, backstage)
        await emit_pads(backstage, thread_id, run_id, 1, 2 * HALF, PAD)
        await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)],
                             seqs=[2 * HALF + 1])
        await reader.read_to_end()
        await reader.response.aclose()
        host, port = app.url.removeprefix("http://").split(":")
        request = (f"GET /threads/{thread_id}/runs/{run_id}/events HTTP/1.1\r\n"
                   "Host: 127.0.0.1\r\n\r\n").encode()
        heads: list[bytes] = []
        clients = []
        try:
            for _ in range(replays):  # each asks for the whole 12 MB run and reads no more
                client = await asyncio.open_connection(host, int(port), limit=1024)
                client[1].transport.set_write_buffer_limits(0)
                sock = client[1].get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                client[1].write(request)
                clients.append(client)
            for client_reader, _ in clients:
                async with asyncio.timeout(WAIT_S):
                    heads.append(await client_reader.readuntil(b"\r\n"))
            await asyncio.sleep(1.0)  # every scan that got a reader has started
            peak = opened["peak"]
            thread = await app.http.get(f"/threads/{thread_id}")
        finally:
            for _, writer in clients:
                writer.close()
    statuses = sorted(head.split()[1].decode() for head in heads)
    assert peak <= readers
    assert statuses.count("200") == readers
    assert statuses.count("503") == replays - readers
    assert thread.status_code in (200, 404)  # answered while the replays hold their readers
    assert sample(app.relay, "replays_busy_total") == replays - readers


async def test_a_slow_but_steady_reader_hands_its_log_reader_on_to_a_stream_waiting(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """A client reading steadily but slowly (never idle) held its log reader until its
    run was read, minutes here, and a stream behind it waited all that time (found by
    probing: 17 of 1,502 events in 20 s). A reader is held ``SLICE_S`` at a time while
    another waits."""
    async with serving(kafka, stream_queue=QUEUE, stream_log_readers=1,
                       stream_idle_s=10.0) as app, \
            slow_http(app.url) as hog_http, slow_http(app.url) as http:
        relay = app.relay
        hog_thread, hog_run, hog = await open_run(hog_http, backstage)
        await emit_pads(backstage, hog_thread, hog_run, 1, 6000, PAD)  # 24 MB
        await until(lambda: sample(relay, "streams_to_log_total") >= 1, "the hog never fell behind")

        async def hog_reads() -> None:  # a socket read every 0.05 s: never idle, never done
            while await hog._read():
                await asyncio.sleep(0.05)

        hogging = asyncio.create_task(hog_reads())
        try:
            await until(lambda: sample(relay, "stream_log_readers") >= 1, "no reader held")
            thread_id, run_id, victim = await open_run(http, backstage)
            await emit_pads(backstage, thread_id, run_id, 1, HALF, PAD)  # it pauses: behind
            await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)],
                                 seqs=[HALF + 1])
            await until(lambda: sample(relay, "stream_log_waiting") >= 1, "nobody waited")
            await victim.read_to_end()
            assert not hogging.done()  # the hog was still reading its run all along
        finally:
            hogging.cancel()
            await hog.response.aclose()
            await victim.response.aclose()
    assert not hog.cut
    assert [seq for seq, _ in victim.frames] == list(range(HALF + 2))
    assert sample(relay, "log_turns_given_up_total") >= 1


async def test_a_slow_replay_hands_its_reader_on_and_goes_on_from_where_it_stopped(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """Replays read in turns too: a replay read slowly gives its reader up to a replay
    asked for meanwhile (which would otherwise be a 503), then goes on from the record
    after its last one: every event once, in order."""
    async with serving(kafka, stream_queue=QUEUE, stream_log_readers=1,
                       stream_idle_s=10.0) as app, \
            slow_http(app.url) as first_http, slow_http(app.url) as second_http:
        relay = app.relay
        runs = []
        for _ in range(2):  # two finished runs, 6 MB each, read by nobody while live
            thread_id, run_id, reader = await open_run(second_http, backstage)
            await emit_pads(backstage, thread_id, run_id, 1, HALF, PAD)
            await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)],
                                 seqs=[HALF + 1])
            await reader.read_to_end()
            await reader.response.aclose()
            runs.append((thread_id, run_id))

        async def replay(http: httpx.AsyncClient, thread_id: str, run_id: str) -> SseReader:
            response = await http.send(http.build_request(
                "GET", f"/threads/{thread_id}/runs/{run_id}/events"), stream=True)
            assert response.status_code == 200, (await response.aread())[:300]
            return SseReader(response)

        slow = await replay(first_http, *runs[0])

        async def slow_reads() -> None:  # never idle, far from done
            while await slow._read():
                await asyncio.sleep(0.05)

        reading = asyncio.create_task(slow_reads())
        try:
            await until(lambda: sample(relay, "stream_log_readers") >= 1, "no reader held")
            await asyncio.sleep(5.0)  # the slow replay's turn is due once another waits
            fast = await replay(second_http, *runs[1])  # waits for the slow one's turn
            await fast.read_to_end()
            assert not reading.done()
        finally:
            reading.cancel()
        await slow.read_to_end()
        await slow.response.aclose()
        await fast.response.aclose()
    for reader in (slow, fast):
        assert [seq for seq, _ in reader.frames] == list(range(HALF + 2))
    assert sample(relay, "log_turns_given_up_total") >= 1
    assert sample(relay, "replays_busy_total") == 0


async def _behind_and_read(http: httpx.AsyncClient, backstage: Backstage, relay: Relay
                           ) -> SseReader:
    """A run whose client falls behind and waits for a log reader, then read to its end."""
    thread_id, run_id, victim = await open_run(http, backstage)
    await emit_pads(backstage, thread_id, run_id, 1, HALF, PAD)  # it reads nothing yet
    await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)], seqs=[HALF + 1])
    await until(lambda: sample(relay, "stream_log_waiting") >= 1, "nobody waited")
    await victim.read_to_end()  # the holder's client reads nothing: only revocation helps
    return victim


async def _revoked_then_read(relay: Relay, hog: SseReader,
                             http: httpx.AsyncClient, backstage: Backstage) -> None:
    """``hog`` holds the only log reader and its client reads nothing; a stream behind
    waits for it and is read to its end (only revocation gives it one before the idle
    limit), then ``hog`` reads on to its own end: both get every event once, in order."""
    victim = await _behind_and_read(http, backstage, relay)
    assert sample(relay, "log_turns_revoked_total") >= 1
    await hog.read_to_end()
    await hog.response.aclose()
    await victim.response.aclose()
    assert not hog.cut
    for reader in (hog, victim):
        assert [seq for seq, _ in reader.frames] == list(range(HALF + 2))


async def test_a_stream_whose_client_stops_reading_loses_its_log_reader_to_one_waiting(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    """A client that stopped reading while its stream held a log reader kept it until the
    idle limit disconnected it (a minute by default), and every stream behind the fan-out
    waited as long (found by probing). Its turn is taken from it once due and idle for a
    slice; reading again, the client goes on from the record after its last one."""
    async with serving(kafka, stream_queue=QUEUE, stream_log_readers=1,
                       stream_idle_s=2 * WAIT_S) as app, \
            slow_http(app.url) as hog_http, slow_http(app.url) as http:
        relay = app.relay
        hog_thread, hog_run, hog = await open_run(hog_http, backstage)
        await emit_pads(backstage, hog_thread, hog_run, 1, HALF, PAD)
        await backstage.emit(hog_thread, hog_run, [finished(hog_thread, hog_run)],
                             seqs=[HALF + 1])
        await until(lambda: sample(relay, "streams_to_log_total") >= 1, "never behind")
        while sample(relay, "stream_log_readers") < 1:  # reads until it holds the reader
            assert await hog._read(), "the run ended before its stream took a reader"
        await _revoked_then_read(relay, hog, http, backstage)


async def test_a_replay_whose_client_stops_reading_loses_its_log_reader_to_one_waiting(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka, stream_queue=QUEUE, stream_log_readers=1,
                       stream_idle_s=2 * WAIT_S) as app, \
            slow_http(app.url) as hog_http, slow_http(app.url) as http:
        relay = app.relay
        thread_id, run_id, reader = await open_run(http, backstage)
        await emit_pads(backstage, thread_id, run_id, 1, HALF, PAD)
        await backstage.emit(thread_id, run_id, [finished(thread_id, run_id)],
                             seqs=[HALF + 1])
        await reader.read_to_end()
        await reader.response.aclose()
        response = await hog_http.send(hog_http.build_request(
            "GET", f"/threads/{thread_id}/runs/{run_id}/events"), stream=True)
        assert response.status_code == 200
        hog = SseReader(response)
        await hog._read()  # then nothing: its scan holds the only reader
        assert sample(relay, "stream_log_readers") == 1
        await _revoked_then_read(relay, hog, http, backstage)
