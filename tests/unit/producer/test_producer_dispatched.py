"""RUN_STARTED echoes the input from the dispatch record: the same JSON as serialising it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from ag_ui.core import RunAgentInput
from producer_support import make_input, resolved

from contracts import Dispatch, decode, encode
from contracts.codec import to_wire
from services.producer.host import Dispatched
from services.runtime import tracing

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize("run_input", [
    make_input(),
    make_input(resume=[resolved("a", {"approved": True, "note": None})], tools=["search"],
               forwarded_props={"script": {"text": "hi", "delayMs": None}}),
    RunAgentInput(thread_id="t", run_id="r", parent_run_id="p", state={"a": [1, None]},
                  messages=[], tools=[], context=[], forwarded_props=None),
])
def test_the_records_input_is_what_serialising_the_decoded_input_gives(
        run_input: RunAgentInput) -> None:
    value = encode(Dispatch(request_id="q", agent="a", input=run_input, submitted_at=NOW,
                            decided_at=NOW))
    work = Dispatched(decode(Dispatch, value), tracing.start(), value)
    assert work.input_wire() == to_wire(work.dispatch.input)
