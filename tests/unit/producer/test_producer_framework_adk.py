"""ag-ui-adk's ``ADKAgent`` hosted as it is: its own refusal is the run's ending.

A worker that holds a thread's open confirmation in its checkpoint but not
the ADK session it came from (``InMemorySessionService`` on another, or a
restarted, worker) admits the resume; ``ADKAgent`` then refuses it with a
``RUN_ERROR`` before any ``RUN_STARTED`` of its own. The runtime opened the
run, so the stream is its ``RUN_STARTED`` and ADK's ``RUN_ERROR``, conformant.
No model is called (the refusal comes first): no LLM, no network.
"""

from __future__ import annotations

import pytest
from ag_ui.core import Interrupt
from ag_ui_adk import ADKAgent
from google.adk.agents import LlmAgent
from google.adk.sessions import InMemorySessionService
from producer_support import assert_conformant, make_input, resolved, run_agent

from services.producer.framework import is_framework_agent

pytestmark = pytest.mark.unit


async def test_an_adk_agent_without_the_session_refuses_the_resume_as_the_runs_error() -> None:
    agent = ADKAgent(adk_agent=LlmAgent(name="refunds", model="unused"), app_name="refunds",
                     emit_interrupt_outcome=True, session_service=InMemorySessionService(),
                     use_thread_id_as_session_id=True)
    assert is_framework_agent(agent)
    open_confirmation = Interrupt(id="adk-confirm-1", reason="confirmation")
    sink = await run_agent(agent, make_input("t-adk", "r2", resume=[resolved("adk-confirm-1",
                                                                             True)]),
                           open_interrupts=[open_confirmation])
    assert_conformant(sink)
    assert sink.types == ["RUN_STARTED", "RUN_ERROR"]
    assert sink.wire[0]["runId"] == "r2"
    assert sink.wire[-1]["code"] == "UNKNOWN_INTERRUPT"
    assert "adk-confirm-1" in sink.wire[-1]["message"]
