"""The SSE body of a run (``sse.run_body``) given records of another writer: what is not a
JSON object never reaches the client, and takes no sequence number from the run's own."""

from __future__ import annotations

import asyncio
import logging

import pytest

from services.consumer.mailbox import Mailbox
from services.consumer.ordering import data_frame
from services.consumer.sse import StreamOutcome, run_body
from services.consumer.streams import Delivery, RunStream

pytestmark = pytest.mark.unit

STARTED = b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}'
CONTENT = b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}'
FINISHED = b'{"type":"RUN_FINISHED","threadId":"t","runId":"r"}'


async def body_of(*deliveries: Delivery, after: int | None = None
                  ) -> tuple[bytes, StreamOutcome]:
    stream = RunStream(("t", "r"), Mailbox(16))
    assert stream.push_all(list(deliveries))
    outcome = StreamOutcome()
    async with asyncio.timeout(2):  # a body that waits past its end fails, not hangs
        chunks = [chunk async for chunk in run_body(stream, outcome, keepalive_s=5.0,
                                                    after=after)]
    return b"".join(chunks), outcome


@pytest.mark.parametrize("garbage", [b"\xff\nnot json", b"not json", b"[1]", b""],
                         ids=["broken-line", "text", "array", "empty"])
async def test_a_record_that_is_not_a_json_object_is_skipped_and_the_run_ends(
        garbage: bytes, caplog: pytest.LogCaptureFixture) -> None:
    """The garbage comes with the sequence number of the run's own end, ahead of it."""
    with caplog.at_level(logging.WARNING):
        body, outcome = await body_of(
            Delivery(1, "RUN_STARTED", STARTED, 10),
            Delivery(2, "TEXT_MESSAGE_CONTENT", CONTENT, 11),
            Delivery(3, "RUN_FINISHED", garbage, 12),
            Delivery(3, "RUN_FINISHED", FINISHED, 13))
    assert body == data_frame(STARTED, 1) + data_frame(CONTENT, 2) + data_frame(FINISHED, 3)
    assert (outcome.terminal, outcome.frames) == (True, 3)
    assert "offset 12 (seq 3) of run r is not a JSON object" in caplog.text


async def test_a_record_with_line_breaks_is_sent_on_one_line() -> None:
    body, outcome = await body_of(
        Delivery(1, "RUN_STARTED", STARTED, 10),
        Delivery(2, "RUN_FINISHED", b'{\n "type": "RUN_FINISHED",\r\n "threadId": "t",'
                                    b' "runId": "r"}', 11))
    assert body == data_frame(STARTED, 1) + data_frame(FINISHED, 2)
    assert outcome.terminal


@pytest.mark.parametrize("after", [3, 4, 50, 10**30], ids=["the-end", "one-past", "past", "huge"])
async def test_a_last_event_id_at_or_past_the_runs_end_ends_the_stream_at_its_end(
        after: int) -> None:
    """A replay of a live run asked from there went live and waited for ever: the end
    was dropped as already delivered."""
    body, outcome = await body_of(
        Delivery(1, "RUN_STARTED", STARTED, 10),
        Delivery(2, "TEXT_MESSAGE_CONTENT", CONTENT, 11),
        Delivery(3, "RUN_FINISHED", FINISHED, 12), after=after)
    assert body == b""
    assert outcome.terminal


async def test_a_last_event_id_before_the_end_gets_the_rest() -> None:
    body, outcome = await body_of(
        Delivery(1, "RUN_STARTED", STARTED, 10),
        Delivery(2, "TEXT_MESSAGE_CONTENT", CONTENT, 11),
        Delivery(3, "RUN_FINISHED", FINISHED, 12), after=1)
    assert body == data_frame(CONTENT, 2) + data_frame(FINISHED, 3)
    assert (outcome.terminal, outcome.frames) == (True, 2)
