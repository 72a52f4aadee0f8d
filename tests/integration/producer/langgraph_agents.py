"""A LangGraph graph of plain functions with an ``interrupt()`` node, and no LLM.

``agent`` is ``ag-ui-langgraph``'s ``LangGraphAgent`` over it, with the 1.0
interrupt outcome switched on: the worker hosts it in process as
``refunds=langgraph_agents:agent``. The graph drafts a refund, asks for
approval (``interrupt``), then sends or drops it by the answer. Its
checkpointer is in memory: enough for a test whose runs all land on one
worker (a graph served by several needs a durable one; see
``services.producer.framework``).
"""

from __future__ import annotations

from typing import Any

from ag_ui_langgraph import LangGraphAgent
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

APPROVAL_SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
                   "required": ["approved"]}


class RefundState(MessagesState):
    approved: bool


def draft(state: RefundState) -> dict[str, Any]:
    return {"messages": [AIMessage(content="I drafted a refund of 42 EUR.")]}


def approve(state: RefundState) -> dict[str, Any]:
    answer = interrupt({"reason": "approval", "message": "Refund 42 EUR?",
                        "responseSchema": APPROVAL_SCHEMA})
    return {"approved": bool(answer.get("approved")) if isinstance(answer, dict) else False}


def settle(state: RefundState) -> dict[str, Any]:
    done = "sent" if state.get("approved") else "dropped"
    return {"messages": [AIMessage(content=f"The refund was {done}.")]}


graph = (StateGraph(RefundState)
         .add_node("draft", draft).add_node("approve", approve).add_node("settle", settle)
         .add_edge(START, "draft").add_edge("draft", "approve")
         .add_edge("approve", "settle").add_edge("settle", END)
         .compile(checkpointer=InMemorySaver()))

agent = LangGraphAgent(name="refunds", graph=graph, emit_interrupt_outcome=True,
                       enable_legacy_on_interrupt_event=False, emit_raw_events=False)
