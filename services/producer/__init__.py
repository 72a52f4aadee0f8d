"""The producer service: agents run as Kafka workers under the AG-UI 1.0 run guarantees.

What agent authors import lives here::

    from services.producer import RunContext, agent_definition

Modules — the SDK: ``agent`` (what an agent is, loading by name),
``context`` (the run context and its helpers), ``effects`` (side effects at
most once), ``errors``. Pure logic: ``bookkeeping`` (what a run opened and
how it must end), ``resume`` (answers, unrecognised entries, uncovered
interrupts), ``checkpoint`` (the per-thread changelog record),
``scheduler`` (ordered bounded concurrency, commit positions), ``sizes``
(records the broker takes, interrupts a thread holds), ``deadletter``
(letters cut to fit). One run: ``runner``, ``sink`` (its records, report,
sink and options). The Kafka service: ``publish`` (event records),
``store`` (the checkpoints topic), ``execution`` (one dispatch, in commit
order), ``recovery`` (closing runs a dead worker left open), ``host`` (one
agent's dispatch consumer), ``worker`` (the process), ``settings``.
``delegation``: child runs of other agents. ``agents/``: the samples.
"""

from services.producer.agent import AgentDefinition, agent_definition, load_agents
from services.producer.context import WARNING_EVENT, MessageStream, RunContext
from services.producer.effects import Effect
from services.producer.errors import (
    AgentLoadError,
    AgentProtocolError,
    InterruptConflictError,
    ProducerError,
)
from services.producer.resume import APPROVAL_REASON, gated_interrupt_id

__all__ = [
    "APPROVAL_REASON",
    "WARNING_EVENT",
    "AgentDefinition",
    "AgentLoadError",
    "AgentProtocolError",
    "Effect",
    "InterruptConflictError",
    "MessageStream",
    "ProducerError",
    "RunContext",
    "agent_definition",
    "gated_interrupt_id",
    "load_agents",
]
