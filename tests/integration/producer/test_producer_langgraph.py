"""A LangGraph graph hosted in process by ``module:object``: no wrapper code, no LLM.

``refunds=langgraph_agents:agent`` names ``ag-ui-langgraph``'s
``LangGraphAgent`` (the optional extra ``langgraph``); the worker streams
its events under the runtime's guarantees. The graph's ``interrupt()``
becomes the run's interrupt outcome, kept in the checkpoint; the resume
answering it reaches the graph as ``RunAgentInput.resume`` and the graph
finishes by the answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from ag_ui.core import ResumeEntry
from producer_harness import Relay, checkpointed, first_input, hosting, resume_input

from services.producer import checkpoint as cp
from services.producer.worker import Worker
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


@pytest.fixture
async def worker(kafka: KafkaSettings) -> AsyncIterator[Worker]:
    async with hosting(kafka, "refunds=langgraph_agents:agent") as running:
        yield running


async def test_a_langgraph_interrupt_is_the_runs_outcome_and_its_resume_finishes_the_graph(
        relay: Relay, worker: Worker) -> None:
    asked = await relay.run("refunds", first_input("t-lg", "lg-1"))
    asked.assert_conformant()
    assert asked.types.count("RUN_STARTED") == 1
    assert "STEP_STARTED" in asked.types
    (interrupt,) = asked.outcome["interrupts"]
    assert interrupt["reason"] == "approval"
    assert interrupt["responseSchema"]["required"] == ["approved"]
    state = await checkpointed(worker, "t-lg", "lg-1")
    assert [i.id for i in cp.open_interrupts(state)] == [interrupt["id"]]

    approve = [ResumeEntry(interrupt_id=interrupt["id"], status="resolved",
                           payload={"approved": True})]
    done = await relay.run("refunds", resume_input(asked, "lg-2", approve))
    done.assert_conformant()
    assert done.outcome == {"type": "success"}
    (snapshot,) = [w for w in done.wire if w["type"] == "MESSAGES_SNAPSHOT"]
    assert snapshot["messages"][-1]["content"] == "The refund was sent."
    state = await checkpointed(worker, "t-lg", "lg-2")
    assert cp.open_interrupts(state) == []
    assert state.active is None
