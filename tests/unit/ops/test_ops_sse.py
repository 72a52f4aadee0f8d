"""The demo's SSE reading: data lines joined, comments skipped, outcome helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.cli.ops.agui_http import RunReply, sse_events

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
