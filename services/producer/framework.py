"""Framework agents in process: an AG-UI agent object hosted with no wrapper code.

Frameworks ship their own AG-UI adapters as objects with a
``run(input: RunAgentInput)`` method streaming ``ag-ui-protocol`` events —
``ag-ui-langgraph``'s ``LangGraphAgent``, ``ag-ui-adk``'s ``ADKAgent``. A
``module:object`` in ``AGUI_AGENTS`` naming such an object is hosted
directly: each run works on a ``clone()`` when the object has one (the
LangGraph adapter keeps per-request state on itself), the framework's own
``RUN_STARTED`` is dropped (the runtime opened the run) and its
``RUN_FINISHED``/``RUN_ERROR`` is the agent's ending, so the runner keeps
every guarantee — validation, bookkeeping, the interrupt outcome recorded
in the checkpoint, what is left open closed.

``ADKAgent`` has no ``clone()``: one instance serves every run (it keys
what it keeps by thread). It may end a run it refuses with a ``RUN_ERROR``
before any ``RUN_STARTED`` (its own resume checks); that is its ending too.
Its tool confirmations are interrupts only with
``emit_interrupt_outcome=True``.

What such an agent needs to survive a move to another worker: its own
state outside the process. A LangGraph graph resumed after an interrupt
reads its thread from the graph's checkpointer, so a graph served by more
than one worker must be compiled with a durable, shared checkpointer
(``AsyncPostgresSaver`` from ``langgraph-checkpoint-postgres``); the
in-memory ``InMemorySaver`` only works while every run of a thread lands
on the same, never restarted worker. An ADK agent keeps its conversation
and its pending confirmations in its ADK session, so ``ADKAgent`` needs a
durable, shared session service: ``DatabaseSessionService`` (extra ``db``
of ``google-adk``, on PostgreSQL) or ``VertexAiSessionService``, with
``use_thread_id_as_session_id=True``; its default
``InMemorySessionService`` (like ``SqliteSessionService``, one host) has
the same limit as ``InMemorySaver``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ag_ui.core import BaseEvent, EventType, RunAgentInput

from services.producer.agent import AgentDefinition

if TYPE_CHECKING:
    from services.producer.context import RunContext


def is_framework_agent(obj: object) -> bool:
    """True for an AG-UI agent object: not callable itself, with a callable ``run``."""
    return not callable(obj) and callable(getattr(obj, "run", None))


def framework_definition(obj: Any, origin: str) -> AgentDefinition:
    """Host ``obj`` (see ``is_framework_agent``) as an agent."""

    async def hosted(run_input: RunAgentInput,
                     ctx: RunContext) -> AsyncIterator[BaseEvent | dict[str, Any]]:
        clone = getattr(obj, "clone", None)
        agent = clone() if callable(clone) else obj
        async for event in agent.run(run_input):
            kind = (event.get("type") if isinstance(event, dict)
                    else getattr(event, "type", None))
            if kind in (EventType.RUN_STARTED, EventType.RUN_STARTED.value):
                continue
            yield event

    description = getattr(obj, "description", None) or f"{type(obj).__name__} ({origin})"
    return AgentDefinition(hosted, description=str(description))
