"""A Google ADK agent served by ``ag-ui-adk``, with no LLM and no network.

``agent`` is ``ag_ui_adk.ADKAgent`` (the optional extra ``adk``) over an ADK
``LlmAgent`` whose model is ``ScriptedModel``: a ``BaseLlm`` that answers
from the request it is given, the way a model would, and never leaves the
process. Asked for a refund, it calls two tools that each need the user's
confirmation (``FunctionTool(require_confirmation=True)``); ADK raises them
as ``adk_request_confirmation`` calls, which ag-ui-adk reports as the 1.0
interrupt outcome (``emit_interrupt_outcome=True``). Resumed, ADK runs a
confirmed tool with the answer as ``tool_context.tool_confirmation.payload``
and the model reports what the tools returned. Anything else is answered
with streamed text.

The worker hosts it as ``refunds=adk_agents:agent`` (in process, from the
test tree) or ``refunds=tests.integration.producer.adk_agents:agent`` (a
``python -m services.producer`` started in the repository). Its sessions are
in memory (``InMemorySessionService``): enough while every run of a thread
lands on the same worker; see ``services.producer.framework`` for what a
deployment needs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from ag_ui_adk import ADKAgent
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool, ToolContext
from google.genai import types

GREETING = ("Hello", " from", " a Google", " ADK agent.")
"""The streamed answer to anything but a refund, chunk by chunk."""


def _text(text: str, *, partial: bool = False) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]),
                       partial=partial)


class ScriptedModel(BaseLlm):
    """A model that decides from the request alone: refund → tools, results → summary."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        results = [p.function_response for p in last.parts or () if p.function_response]
        if results:
            said = ", ".join(f"{r.name}={(r.response or {}).get('result', r.response)}"
                             for r in results)
            yield _text(f"settled: {said}")
            return
        asked = " ".join(p.text for p in last.parts or () if p.text)
        if "refund" in asked.lower():
            yield LlmResponse(content=types.Content(role="model", parts=[
                types.Part(text="I will refund 42 EUR to customer 7."),
                types.Part(function_call=types.FunctionCall(
                    name="approve_amount", args={"amount": 42})),
                types.Part(function_call=types.FunctionCall(
                    name="confirm_customer", args={"customer": 7})),
            ]))
            return
        if stream:
            for chunk in GREETING:
                yield _text(chunk, partial=True)
        yield _text("".join(GREETING))


def _answer(tool_context: ToolContext) -> Any:
    confirmation = tool_context.tool_confirmation
    return confirmation.payload if confirmation is not None else None


def approve_amount(amount: int, tool_context: ToolContext) -> str:
    """Pay out the refund's amount once the user confirmed it."""
    return f"{amount}:{_answer(tool_context)}"


def confirm_customer(customer: int, tool_context: ToolContext) -> str:
    """Credit the refund to the customer once the user confirmed who it is."""
    return f"{customer}:{_answer(tool_context)}"


root_agent = LlmAgent(
    name="refunds", model=ScriptedModel(), description="Refunds with two confirmations (ADK)",
    instruction="Refund what the user asks for, with the user's confirmation.",
    tools=[FunctionTool(approve_amount, require_confirmation=True),
           FunctionTool(confirm_customer, require_confirmation=True)])

app = App(name="refunds", root_agent=root_agent,
          resumability_config=ResumabilityConfig(is_resumable=True))

agent = ADKAgent.from_app(app, emit_interrupt_outcome=True,
                          session_service=InMemorySessionService(),
                          use_thread_id_as_session_id=True)
