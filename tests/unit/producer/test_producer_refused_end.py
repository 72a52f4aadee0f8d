"""A run whose end the broker refused for its size ends with a RUN_ERROR saying so.

The sink raises ``RecordTooLargeError`` from ``send_terminal`` when the broker refused
a record of the run or its terminal record (a topic's ``max.message.bytes`` lowered
under ``AGUI_MAX_RECORD_BYTES``): the runner ends the run with one RUN_ERROR carrying
that error, numbered as the refused end was, and the worker goes on. A RUN_ERROR the
broker refuses too is raised: nothing can report it.
"""

from __future__ import annotations

from typing import Any

import pytest
from producer_support import ListSink, run_agent

from services.producer.context import RunContext
from services.producer.errors import RecordTooLargeError
from services.producer.sink import EventRecord, RunReport

pytestmark = pytest.mark.unit

REFUSED = "the run's RUN_FINISHED #3, a 9000-byte record, was refused by the broker"


class RefusingSink(ListSink):
    """Refuses the first ``refusals`` terminal records, as the broker would for size."""

    def __init__(self, refusals: int = 1) -> None:
        super().__init__()
        self.refusals = refusals
        self.refused: list[str] = []

    async def send_terminal(self, record: EventRecord, report: RunReport) -> None:
        if self.refusals:
            self.refusals -= 1
            self.refused.append(record.event_type)
            raise RecordTooLargeError(REFUSED, "event_too_large", 9000)
        await super().send_terminal(record, report)


async def talker(inp: Any, ctx: RunContext) -> dict[str, str]:
    message = await ctx.start_message()
    await message.write("hello")
    await message.end()
    return {"answer": "x" * 100}


async def test_a_refused_end_is_replaced_by_a_run_error_numbered_as_it_was() -> None:
    sink = await run_agent(talker, sink=RefusingSink())
    assert sink.refused == ["RUN_FINISHED"]
    assert sink.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                          "TEXT_MESSAGE_END", "RUN_ERROR"]
    assert [r.seq for r in sink.records] == [0, 1, 2, 3, 4]
    assert sink.wire[-1]["code"] == "event_too_large"
    assert sink.wire[-1]["message"] == REFUSED
    assert sink.report is not None
    assert sink.report.outcome == "error"
    assert sink.report.terminal.event_type == "RUN_ERROR"


async def test_a_refused_run_error_is_raised() -> None:
    with pytest.raises(RecordTooLargeError):
        await run_agent(talker, sink=RefusingSink(refusals=2))
