"""``sse``: an upstream's event stream decoded as httpx-sse does, an unfinished event held
as its bytes.

The events are those httpx-sse's decoder reads from the same body, whatever the line ends
and read sizes; what differs is the memory an unfinished event holds. httpx-sse keeps a
``str`` per ``data:`` line: an event of ``data:ab`` lines just under ``MAX_EVENT_BYTES``
cost about eight times that limit (a live worker grew 383 MB for ten runs of 4 MB
events, 55 MB when each was one long line), so one upstream could make a worker hold
gigabytes, not the ``MAX_EVENT_BYTES`` times ``CONCURRENCY`` its settings state.
"""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import RunAgentInput
from httpx_sse import ServerSentEvent
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from services.producer.errors import RunFailedError
from services.producer.upstream.client import UpstreamAgent
from services.producer.upstream.config import UpstreamConfig
from services.producer.upstream.sse import SSEBytesDecoder

pytestmark = pytest.mark.unit

BODY = ("data: {\"a\": 1}\n\n"
        "event: delta\ndata:x\ndata: y\ndata\n\n"
        ": a comment\nid: 7\nretry: 1500\ndata:  two spaces\n\n"
        "id: bad\0id\nretry: soon\nfield-unknown: z\ndata: café ✓\n\n"
        "event: only\n\n"
        "data: unfinished at the end")


def httpx_sse_events(body: str) -> list[ServerSentEvent]:
    lines, decoder = SSELineDecoder(), SSEDecoder()
    out = [decoder.decode(line) for line in [*lines.decode(body), *lines.flush()]]
    return [sse for sse in out if sse is not None]


def our_events(body: bytes, read: int) -> list[ServerSentEvent]:
    decoder = SSEBytesDecoder()
    out = [sse for i in range(0, len(body), read) for sse in decoder.feed(body[i:i + read])]
    return [*out, *decoder.flush()]


def fields(events: list[ServerSentEvent]) -> list[tuple[str, str, str, int | None]]:
    return [(e.event, e.data, e.id, e.retry) for e in events]


@pytest.mark.parametrize("ending", ["\n", "\r", "\r\n"])
@pytest.mark.parametrize("read", [1, 2, 3, 7, 64, 100_000])
def test_the_events_are_httpx_sses_in_every_line_end_form_and_read_size(
        ending: str, read: int) -> None:
    body = BODY.replace("\n", ending)
    expected = httpx_sse_events(body)
    assert len(expected) == 5
    assert fields(our_events(body.encode(), read)) == fields(expected)


def test_a_character_split_across_reads_is_decoded_whole_and_bad_bytes_replaced() -> None:
    body = "data: ✓✓\n\n".encode() + b"data: \xff\n\n"
    assert [e.data for e in our_events(body, 1)] == ["✓✓", "\ufffd"]


def test_a_cr_ending_the_body_ends_its_last_line() -> None:
    assert [e.data for e in our_events(b"data: a\r\r", 100)] == ["a"]
    assert [e.data for e in our_events(b"data: a\n\r", 100)] == ["a"]


def test_an_event_ended_by_two_crs_is_dispatched_by_the_read_that_ends_it() -> None:
    """A CR ending a read had been held until the next read (a LF might follow it), so
    the event its blank line ended waited for the upstream's next byte."""
    decoder = SSEBytesDecoder()
    assert [e.data for e in decoder.feed(b"data: a\r\r")] == ["a"]
    assert [e.data for e in decoder.feed(b"\ndata: b\r")] == []  # the CRLF's LF: no line
    assert [e.data for e in decoder.feed(b"\n\r\n")] == ["b"]


async def test_an_upstream_writing_cr_line_ends_and_holding_its_stream_open_finishes(
        ) -> None:
    """Lines may end at a CR: an upstream that ends its events so and leaves its stream
    open after ``RUN_FINISHED`` had its run fail ``upstream_timeout``, "sent nothing"."""
    events = [{"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"},
              {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}]

    async def body() -> AsyncIterator[bytes]:
        for event in events:
            yield b"data: " + orjson.dumps(event) + b"\r\r"
        await asyncio.sleep(30)  # open after the run's end (the late-error grace covers it)

    up = UpstreamAgent(UpstreamConfig(name="up", url="http://upstream.test/agui",
                                      idle_timeout_s=2.0))
    up._client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda _: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                 content=body())))
    out = [item async for item in up(run_input(), None)]  # type: ignore[arg-type]
    assert out == events[1:]


def run_input() -> RunAgentInput:
    return RunAgentInput(thread_id="t1", run_id="r1", state={}, messages=[], tools=[],
                         context=[], forwarded_props={})


def frame(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


@pytest.mark.parametrize("line", [b"data:ab\n", b"data:" + b"a" * 4091 + b"\n"],
                         ids=["short-data-lines", "long-data-lines"])
async def test_an_unfinished_event_holds_no_more_than_a_few_times_its_limit(
        line: bytes) -> None:
    """An upstream holds an event open just under ``MAX_EVENT_BYTES`` (1 MiB here)."""
    limit = 1 << 20
    body_lines = line * ((limit - 4096) // len(line))
    held, release = asyncio.Event(), asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield frame({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"})
        for i in range(0, len(body_lines), 65536):
            yield body_lines[i:i + 65536]
        held.set()
        await release.wait()
        yield b"\n" + frame({"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"})

    up = UpstreamAgent(UpstreamConfig(name="up", url="http://upstream.test/agui",
                                      max_event_bytes=limit))
    up._client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda _: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                 content=body())))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        reading = asyncio.create_task(anext(aiter(up(run_input(), None))))  # type: ignore[arg-type]
        await asyncio.wait_for(held.wait(), 10)
        await asyncio.sleep(0.05)
        holding = tracemalloc.get_traced_memory()[0] - base
        release.set()
        with contextlib.suppress(RunFailedError):  # "ab\nab..." is no JSON
            await reading
    finally:
        tracemalloc.stop()
    assert holding < 3 * limit, (
        f"an unfinished {len(body_lines)}-byte event held {holding} bytes "
        f"({holding / limit:.1f} times MAX_EVENT_BYTES)")
