"""Framework AG-UI agent objects (``run(input)`` streaming events) hosted as they are."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from ag_ui.core import (
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
)
from producer_support import assert_conformant, make_input, outcome_of, run_agent

from services.producer.agent import as_definition
from services.producer.errors import AgentLoadError
from services.producer.framework import is_framework_agent

pytestmark = pytest.mark.unit


class FrameworkAgent:
    """Shaped like ag-ui-langgraph's LangGraphAgent: run(input), clone() per request."""

    def __init__(self, clones: list[FrameworkAgent] | None = None) -> None:
        self.clones = clones if clones is not None else []
        self.runs = 0
        self.description = "a framework's agent"

    def clone(self) -> FrameworkAgent:
        copy = FrameworkAgent(self.clones)
        self.clones.append(copy)
        return copy

    async def run(self, run_input: RunAgentInput) -> AsyncIterator[Any]:
        self.runs += 1
        yield RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id)
        yield TextMessageStartEvent(message_id="m1", role="assistant")
        yield TextMessageContentEvent(message_id="m1", delta="asking")
        yield RunFinishedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id,
                               outcome=RunFinishedInterruptOutcome(interrupts=[
                                   {"id": "ask-1", "reason": "input"}]))


async def test_an_agent_object_is_hosted_on_a_clone_per_run_under_the_run_guarantees(
        caplog: pytest.LogCaptureFixture) -> None:
    original = FrameworkAgent()
    assert is_framework_agent(original)
    definition = as_definition(original, "tests:agent")
    assert definition.description == "a framework's agent"
    for run_id in ("r1", "r2"):
        sink = await run_agent(definition, make_input("t1", run_id))
        assert_conformant(sink)
        assert sink.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                              "TEXT_MESSAGE_END", "RUN_FINISHED"]
        assert outcome_of(sink)["interrupts"] == [{"id": "ask-1", "reason": "input"}]
    assert original.runs == 0
    assert [c.runs for c in original.clones] == [1, 1]
    assert "yielded RUN_STARTED" not in caplog.text


def test_an_object_neither_callable_nor_an_agent_object_is_refused() -> None:
    assert not is_framework_agent(object())
    with pytest.raises(AgentLoadError, match="not an agent callable"):
        as_definition(object(), "tests:thing")
