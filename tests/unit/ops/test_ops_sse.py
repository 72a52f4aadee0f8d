"""The demo's SSE reading: data lines joined, comments skipped, outcome helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from services.cli.ops.agui_http import RunReply, run_agent, sse_events, sse_lines

pytestmark = pytest.mark.unit


async def lines(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


async def test_sse_data_frames_become_events() -> None:
    body = lines(": keepalive", "", 'data: {"type":"RUN_STARTED"}', "",
                 'data: {"type":', 'data: "RUN_FINISHED"}', "", 'data: {"last":1}')
    assert [e async for e in sse_events(body)] == [
        {"type": "RUN_STARTED"}, {"type": "RUN_FINISHED"}, {"last": 1}]


def test_reply_reads_the_interrupt_outcome() -> None:
    reply = RunReply(200, [{"type": "RUN_STARTED"}, {"type": "RUN_FINISHED", "outcome": {
        "type": "interrupt", "interrupts": [{"id": "a", "reason": "r"}]}}])
    assert reply.terminal == reply.events[1]
    assert [i["id"] for i in reply.interrupts] == ["a"]
    assert RunReply(422, problem={"code": "x"}).interrupts == []
    assert RunReply(200, [{"type": "RUN_ERROR", "message": "m"}]).interrupts == []


async def chunks(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


async def test_sse_lines_end_at_crlf_lf_or_cr_only_even_across_chunks() -> None:
    body = chunks("data: a\u2028b\x85c\u2029", "d\r", "\ndata: e\r", "\r", "\n: x\n", "\rtail")
    assert [line async for line in sse_lines(body)] == [
        "data: a\u2028b\x85c\u2029d", "data: e", "", ": x", "", "tail"]


async def test_an_event_holding_a_line_separator_reads_whole_over_http() -> None:
    """JSON leaves U+2028, U+2029 and U+0085 unescaped; a run's text may hold them."""
    delta = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "one\u2028two\x85"}
    frames = [{"type": "RUN_STARTED", "threadId": "t\u2029", "runId": "r"}, delta,
              {"type": "RUN_FINISHED", "threadId": "t\u2029", "runId": "r"}]
    body = b"".join(b"data: " + orjson.dumps(f) + b"\n\n" for f in frames)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer),
                                 base_url="http://relay") as client:
        reply = await run_agent(client, "scripted", {"threadId": "t\u2029", "runId": "r"})
    assert reply.events == frames
    assert reply.terminal == frames[-1]
