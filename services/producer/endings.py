"""How a run may end, as values: what the driver tells the bookkeeping, and its answer.

The run driver (``services.producer.runner``) turns however the agent
stopped into one ``Ending`` — ``Completed`` (it returned or yielded
``RUN_FINISHED``), ``Cancelled`` or ``Failed`` — and ``RunBook.finish``
answers with a ``Terminal``: the closing events, the single terminal event
and the interrupts a checkpoint keeps. Plain frozen data, shared by the
bookkeeping, the size gate (``sizes``) and the sink, so none of them imports
another to name an outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ag_ui.core import BaseEvent, Interrupt, RunErrorEvent, RunFinishedEvent

Kind = Literal["message", "tool_call", "step", "reasoning", "reasoning_message", "subagent"]
Outcome = Literal["success", "interrupt", "cancelled", "error"]


@dataclass(frozen=True, slots=True)
class OpenItem:
    """Something a run opened and has not closed yet."""

    kind: Kind
    id: str
    owner: str | None
    """The opener's ``subagentRunId``; continuations must agree with it."""


@dataclass(frozen=True, slots=True)
class Completed:
    """The agent returned (or yielded a RUN_FINISHED): finish by what is open."""

    result: Any = None


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The run was told to stop (or the agent chose the cancelled outcome)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The run failed: it ends with RUN_ERROR."""

    message: str
    code: str | None = None
    close_open: bool = False
    """Close what is open before the RUN_ERROR (a run the runtime stopped for a limit)."""


Ending = Completed | Cancelled | Failed


@dataclass(frozen=True, slots=True)
class Terminal:
    """How a run ends: the closing events, then exactly one terminal event."""

    closing: tuple[BaseEvent, ...]
    event: RunFinishedEvent | RunErrorEvent
    outcome: Outcome
    open_interrupts: tuple[Interrupt, ...]
    """The interrupts still open once the run closed (what a checkpoint keeps)."""
