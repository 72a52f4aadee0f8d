"""A LangGraph graph served by ag-ui-langgraph's FastAPI endpoint: the interop upstream.

The graph is plain functions, no LLM: two checks run in parallel, each an
``interrupt()`` (so a run ends with two open interrupts and a partial resume
has something to leave out), then ``settle`` says what the answers were.
The agent has the 1.0 interrupt outcome switched on and reads
``RunAgentInput.resume``; ``RefundsAgent`` maps several resume entries onto
LangGraph's resume-by-interrupt-id map (the adapter's documented hook; its
default sends a sentinel LangGraph does not read). ``serving()`` runs the
endpoint under uvicorn in the test's event loop on a free loopback port.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import AsyncIterator
from typing import Annotated, Any

from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import FastAPI
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from tests.asgi_server import served

PATH = "/agui"


class RefundState(MessagesState):
    answers: Annotated[list[str], operator.add]


def amount(state: RefundState) -> dict[str, Any]:
    answer = interrupt({"reason": "approve_amount", "message": "Refund 42 EUR?"})
    return {"answers": [f"amount={answer}"]}


def customer(state: RefundState) -> dict[str, Any]:
    answer = interrupt({"reason": "confirm_customer", "message": "Is the customer acme?"})
    return {"answers": [f"customer={answer}"]}


def settle(state: RefundState) -> dict[str, Any]:
    return {"messages": [AIMessage(content="settled: " + ", ".join(sorted(state["answers"])))]}


class RefundsAgent(LangGraphAgent):
    """Several resume entries → ``Command(resume={interrupt id: answer})``."""

    def _build_command_from_agui_resume(self, entries: list[Any], *,
                                        open_interrupts: Any = None) -> Command[Any]:
        return Command(resume={e.interrupt_id: (e.payload if e.status == "resolved"
                                                else "cancelled") for e in entries})


def refunds_agent() -> RefundsAgent:
    graph = (StateGraph(RefundState)
             .add_node("amount", amount).add_node("customer", customer)
             .add_node("settle", settle)
             .add_edge(START, "amount").add_edge(START, "customer")
             .add_edge(["amount", "customer"], "settle").add_edge("settle", END)
             .compile(checkpointer=InMemorySaver()))
    return RefundsAgent(name="refunds", graph=graph, emit_interrupt_outcome=True,
                        enable_legacy_on_interrupt_event=False, emit_raw_events=False)


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[str]:
    """The endpoint's URL while it is served (uvicorn, this loop, a free port)."""
    app = FastAPI()
    add_langgraph_fastapi_endpoint(app, refunds_agent(), PATH)
    async with served(app) as port:
        yield f"http://127.0.0.1:{port}{PATH}"
