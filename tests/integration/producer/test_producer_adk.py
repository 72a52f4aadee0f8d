"""A Google ADK agent hosted in process by ``module:object``: no wrapper code, no LLM.

``refunds=adk_agents:agent`` names ``ag-ui-adk``'s ``ADKAgent`` (the optional
extra ``adk``) over an ``LlmAgent`` with a scripted model; the worker streams
its events under the runtime's guarantees. ADK's streamed text is the run's
message; its tool confirmations become the run's interrupt outcome, kept in
the checkpoint; the resume answering them reaches ADK as
``RunAgentInput.resume``, ADK runs the confirmed tool with the answer and the
model reports it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from adk_agents import GREETING
from ag_ui.core import ResumeEntry, RunAgentInput, UserMessage
from producer_harness import Relay, checkpointed, first_input, hosting, resume_input

from services.producer import checkpoint as cp
from services.producer.worker import Worker
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

UNSTARTED_TOOL_RESULT = "AGUI207"
"""ag-ui-validate's rule for a TOOL_CALL_RESULT whose call is not open."""


@pytest.fixture
async def worker(kafka: KafkaSettings) -> AsyncIterator[Worker]:
    async with hosting(kafka, "refunds=adk_agents:agent") as running:
        yield running


async def test_an_adk_agents_streamed_text_is_the_runs_message(
        relay: Relay, worker: Worker) -> None:
    said = await relay.run("refunds", first_input("t-adk-text", "adk-t1"))
    said.assert_conformant()
    assert said.types.count("RUN_STARTED") == 1
    assert said.types.count("TEXT_MESSAGE_CONTENT") >= len(GREETING)
    assert said.text() == "".join(GREETING)
    assert said.outcome == {"type": "success"}
    state = await checkpointed(worker, "t-adk-text", "adk-t1")
    assert cp.open_interrupts(state) == []


async def test_adk_tool_confirmations_are_the_runs_interrupts_and_the_resume_runs_the_tool(
        relay: Relay, worker: Worker) -> None:
    ask = RunAgentInput(thread_id="t-adk", run_id="adk-1", state={}, tools=[], context=[],
                        forwarded_props={},
                        messages=[UserMessage(id="u-adk", content="Refund order 42.")])
    asked = await relay.run("refunds", ask)
    asked.assert_conformant()
    assert asked.types.count("RUN_STARTED") == 1
    interrupts = asked.outcome["interrupts"]
    assert [i["reason"] for i in interrupts] == ["confirmation", "confirmation"]
    tools = [i["metadata"]["adk"]["originalFunctionCall"]["name"] for i in interrupts]
    assert tools == ["approve_amount", "confirm_customer"]
    assert all(i["toolCallId"] == i["id"] for i in interrupts)
    state = await checkpointed(worker, "t-adk", "adk-1")
    assert [i.id for i in cp.open_interrupts(state)] == [i["id"] for i in interrupts]

    answers = [ResumeEntry(interrupt_id=i["id"], status="resolved", payload=answer)
               for i, answer in zip(interrupts, ("yes", "no"), strict=True)]
    done = await relay.run("refunds", resume_input(asked, "adk-2", answers))
    # ag-ui-adk 0.11 answers a confirmed tool's call twice: ADK's placeholder result
    # ("requires confirmation") in the interrupted run, the real one here; ag-ui-validate
    # reads the second as a result for a call not open (AGUI207). The upstream's finding.
    done.assert_conformant(waived=[UNSTARTED_TOOL_RESULT])
    assert done.types.count("TOOL_CALL_RESULT") >= 1
    assert done.outcome == {"type": "success"}
    # ADK ran the confirmed tool with the user's answer; the model reported it. Only the
    # last-answered one: ag-ui-adk 0.11 appends each answer as its own session event and
    # ADK 2.13 acts on the last (approve_amount's "yes" is lost upstream; see README).
    assert done.text().startswith("settled: ")
    assert "confirm_customer=7:no" in done.text()
    state = await checkpointed(worker, "t-adk", "adk-2")
    assert cp.open_interrupts(state) == []
    assert state.active is None
