"""Run bookkeeping: what one run has opened and raised, and how it must end — pure.

The runner passes every event an agent emits through ``RunBook.admit``,
which checks it against the AG-UI 1.0 lifecycle (digest §2d, §3, §4),
expands chunk events into explicit start/content/end triads, and records
what is open (text and reasoning messages, reasoning spans, tool calls,
steps per owner, subagent invocations). Interrupts are recorded with
``raise_interrupt``; token usage with ``add_usage``. ``RunBook.finish`` then
turns how the agent ended (``Completed``, ``Cancelled``, ``Failed``) into the
closing events and the one terminal event, applying the run guarantees:

* everything opened is closed, innermost first, before ``RUN_FINISHED``
  (``RUN_ERROR`` implicitly ends whatever is open, so nothing is added —
  unless the runtime stopped the run for a limit: ``Failed.close_open``);
* any interrupt known to be open — raised in this run, or carried over
  uncovered from an earlier run — makes the outcome ``interrupt`` (never
  success), ids unique;
* success lists the calls started and not answered as ``pendingToolCallIds``;
* usage is this run's own, aggregated per provider and model.

The ending values live in ``endings`` (re-exported here), the events the
book writes itself (chunk triads, closing events) in ``chunks``. No I/O, no
clock, no asyncio: the module is exercised exhaustively by unit and
property tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ag_ui.core import (
    BaseEvent,
    EventType,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    aggregate_token_usage,
)

from services.producer.chunks import CHUNK_OF, chunk_content, chunk_start, closing_event
from services.producer.endings import (
    Cancelled,
    Completed,
    Ending,
    Failed,
    Kind,
    OpenItem,
    Outcome,
    Terminal,
)
from services.producer.errors import AgentProtocolError, InterruptConflictError
from services.producer.ttl import stamped

__all__ = ["Cancelled", "Completed", "Ending", "Failed", "OpenItem", "Outcome", "RunBook",
           "Terminal"]

_RUN_TYPES = frozenset({EventType.RUN_STARTED, EventType.RUN_FINISHED, EventType.RUN_ERROR})


_CONTINUATIONS: dict[type[BaseEvent], tuple[Kind, bool]] = {
    TextMessageContentEvent: ("message", False),
    TextMessageEndEvent: ("message", True),
    ToolCallArgsEvent: ("tool_call", False),
    ToolCallEndEvent: ("tool_call", True),
    StepFinishedEvent: ("step", True),
    ReasoningEndEvent: ("reasoning", True),
    ReasoningMessageContentEvent: ("reasoning_message", False),
    ReasoningMessageEndEvent: ("reasoning_message", True),
}
"""Events that continue (or close) something opened earlier in the run."""


def _item_id(event: BaseEvent) -> str:
    for name in ("message_id", "tool_call_id", "step_name"):
        value = getattr(event, name, None)
        if isinstance(value, str):
            return value
    raise AgentProtocolError(f"{event.type.value} names nothing it continues")


def _key(kind: Kind, item_id: str, owner: str | None) -> tuple[str, str, str | None]:
    # Steps are tracked per owner (two subagents may run a step of one name);
    # every other id is run-wide.
    return (kind, item_id, owner if kind == "step" else None)


class RunBook:
    """The bookkeeping of one run. Feed it events in publish order."""

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        frontend_tools: Iterable[str] = (),
        carried: Sequence[Interrupt] = (),
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.frontend_tools = frozenset(frontend_tools)
        self._carried: dict[str, Interrupt] = {i.id: i for i in carried}
        self._raised: dict[str, Interrupt] = {}
        self._open: dict[tuple[str, str, str | None], OpenItem] = {}
        self._started: set[tuple[str, str]] = set()
        self._tool_names: dict[str, str] = {}
        self._tool_results: set[str] = set()
        self._subagent_parent: dict[str, str | None] = {}
        self._subagents_done: set[str] = set()
        self._chunk: dict[Kind, str] = {}
        self._usage: list[TokenUsage] = []
        self._ended = False

    # ---- what is known -------------------------------------------------

    @property
    def ended(self) -> bool:
        """True once ``finish`` decided the terminal event."""
        return self._ended

    def open_items(self) -> list[OpenItem]:
        """What is open, in the order it was opened."""
        return list(self._open.values())

    def raised(self) -> list[Interrupt]:
        """The interrupts raised in this run, in order."""
        return list(self._raised.values())

    def carried(self) -> list[Interrupt]:
        """Interrupts from earlier runs still open (uncovered) in this one."""
        return list(self._carried.values())

    def pending_tool_calls(self) -> list[str]:
        """Tool calls started in this run without a result, in call order."""
        return [c for c in self._tool_names if c not in self._tool_results]

    def pending_frontend_calls(self) -> list[str]:
        """Pending calls of tools the application (``input.tools``) executes."""
        return [c for c in self.pending_tool_calls() if self._tool_names[c] in self.frontend_tools]

    def active_subagents(self) -> list[str]:
        """Subagent invocations announced and not finished, in start order."""
        return [i.id for i in self._open.values() if i.kind == "subagent"]

    # ---- interrupts and usage -----------------------------------------

    def raise_interrupt(self, interrupt: Interrupt) -> Interrupt:
        """Record an interrupt; the same one twice is a no-op, a different one a conflict."""
        if self._ended:
            raise AgentProtocolError("interrupt raised after the run ended")
        known = self._raised.get(interrupt.id) or self._carried.get(interrupt.id)
        if known is not None:
            if known.model_dump(by_alias=True) != interrupt.model_dump(by_alias=True):
                raise InterruptConflictError(interrupt.id)
            return known
        self._raised[interrupt.id] = interrupt
        return interrupt

    def stamp_expiry(self, expires_at: str) -> None:
        """Give every interrupt raised in this run without ``expiresAt`` this one
        (the default TTL, ``services.producer.ttl``); carried ones keep theirs."""
        for key, interrupt in self._raised.items():
            self._raised[key] = stamped(interrupt, expires_at)

    def suspension_of(self, subagent_run_id: str) -> list[str] | None:
        """The ids a closing invocation is suspended on, or None when it is not.

        Its own interrupts when it raised any; an empty list when only a
        descendant did (it owns none, digest rule 54); None otherwise.
        """
        own = [i.id for i in self._raised.values() if i.subagent_run_id == subagent_run_id]
        if own:
            return own
        for interrupt in self._raised.values():
            if interrupt.subagent_run_id and self._descends(interrupt.subagent_run_id,
                                                            subagent_run_id):
                return []
        return None

    def _descends(self, child: str, ancestor: str) -> bool:
        seen: set[str] = set()
        parent = self._subagent_parent.get(child)
        while parent is not None and parent not in seen:
            if parent == ancestor:
                return True
            seen.add(parent)
            parent = self._subagent_parent.get(parent)
        return False

    def add_usage(self, usage: TokenUsage) -> None:
        """Count one model call's tokens toward this run (and only this run)."""
        self._usage.append(usage)

    def usage(self) -> list[TokenUsage] | None:
        """This run's usage per provider and model; None when nothing was reported."""
        if not self._usage:  # most runs report none: skip the aggregation
            return None
        return aggregate_token_usage(self._usage) or None

    # ---- admitting events ----------------------------------------------

    def admit(self, event: BaseEvent) -> list[BaseEvent]:
        """Check one agent event; return what to publish for it (chunks expanded).

        Raises ``AgentProtocolError`` for an event AG-UI 1.0 forbids here.
        Run lifecycle events (RUN_*) belong to the runtime, not to agents,
        and are refused: the runner interprets them before calling this.
        """
        if self._ended:
            raise AgentProtocolError(f"{event.type.value} after the run ended")
        if not self._chunk and type(event) in _CONTINUATIONS:
            self._track(event)  # a streamed delta (or an end): the common case, no chunks
            return [event]
        if event.type in _RUN_TYPES:
            raise AgentProtocolError(f"{event.type.value} is emitted by the runtime, not admitted")
        chunk_kind = CHUNK_OF.get(event.type)
        out = self._close_chunks(keep=chunk_kind)
        if chunk_kind is None:
            self._track(event)
            out.append(event)
        else:
            out += self._expand_chunk(chunk_kind, event)
        return out

    def _close_chunks(self, keep: Kind | None = None) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if not self._chunk:
            return out
        for kind in list(self._chunk):
            if kind != keep:
                out += self._close_chunk(kind)
        return out

    def _close_chunk(self, kind: Kind) -> list[BaseEvent]:
        item_id = self._chunk.pop(kind)
        item = self._open.get(_key(kind, item_id, None))
        if item is None:  # closed explicitly meanwhile
            return []
        closing = self._closing_event(item, "success")
        self._track(closing)
        return [closing]

    def _expand_chunk(self, kind: Kind, event: BaseEvent) -> list[BaseEvent]:
        owner = getattr(event, "subagent_run_id", None)
        item_id: str | None = getattr(event, "message_id", None) or getattr(
            event, "tool_call_id", None)
        delta: str | None = getattr(event, "delta", None)
        current = self._chunk.get(kind)
        out: list[BaseEvent] = []
        if current is None or (item_id is not None and item_id != current):
            if current is not None:
                out += self._close_chunk(kind)
            if item_id is None:
                raise AgentProtocolError(f"the first {event.type.value} of a stream needs its id")
            start = chunk_start(kind, item_id, event, owner)
            self._track(start)
            out.append(start)
            self._chunk[kind] = item_id
            current = item_id
        if delta:
            content = chunk_content(kind, current, delta, owner)
            self._track(content)
            out.append(content)
        return out

    def _track(self, event: BaseEvent) -> None:
        owner: str | None = getattr(event, "subagent_run_id", None)
        continued = _CONTINUATIONS.get(type(event))
        if continued is not None:
            kind, closes = continued
            self._continue(kind, _item_id(event), owner, close=closes)
        elif isinstance(event, TextMessageStartEvent):
            self._open_item("message", event.message_id, owner)
        elif isinstance(event, ToolCallStartEvent):
            self._open_item("tool_call", event.tool_call_id, owner)
            self._tool_names[event.tool_call_id] = event.tool_call_name
        elif isinstance(event, ToolCallResultEvent):
            if _key("tool_call", event.tool_call_id, None) in self._open:
                raise AgentProtocolError(f"TOOL_CALL_RESULT for tool call {event.tool_call_id!r} "
                                        "before its TOOL_CALL_END")
            self._tool_results.add(event.tool_call_id)
        elif isinstance(event, StepStartedEvent):
            self._open_item("step", event.step_name, owner)
        elif isinstance(event, ReasoningStartEvent):
            self._open_item("reasoning", event.message_id, owner)
        elif isinstance(event, ReasoningMessageStartEvent):
            self._open_item("reasoning_message", event.message_id, owner)
        elif isinstance(event, SubagentStartedEvent):
            self._start_subagent(event)
        elif isinstance(event, SubagentFinishedEvent | SubagentErrorEvent):
            self._finish_subagent(event)

    def _open_item(self, kind: Kind, item_id: str, owner: str | None) -> None:
        key = _key(kind, item_id, owner)
        if key in self._open:
            raise AgentProtocolError(f"{kind} {item_id!r} started while already open")
        if kind not in ("step", "subagent"):
            if (kind, item_id) in self._started:
                raise AgentProtocolError(f"{kind} id {item_id!r} reused within the run")
            self._started.add((kind, item_id))
        self._open[key] = OpenItem(kind, item_id, owner)

    def _continue(self, kind: Kind, item_id: str, owner: str | None, *, close: bool) -> None:
        key = _key(kind, item_id, owner)
        item = self._open.get(key)
        if item is None:
            raise AgentProtocolError(f"{kind} {item_id!r} is not open"
                                    + (f" for subagent {owner!r}" if kind == "step" and owner
                                       else ""))
        if owner is not None and owner != item.owner:
            raise AgentProtocolError(
                f"{kind} {item_id!r} continued with subagentRunId {owner!r}, "
                f"opened by {item.owner!r}")
        if close:
            del self._open[key]
            for kind_name, chunk_id in list(self._chunk.items()):
                if kind_name == kind and chunk_id == item_id:
                    del self._chunk[kind_name]

    def _start_subagent(self, event: SubagentStartedEvent) -> None:
        sid = event.subagent_run_id
        parent = event.parent_subagent_run_id
        if sid in self._subagents_done:
            raise AgentProtocolError(f"subagent {sid!r} announced again after it finished "
                                    "in this run")
        if parent is not None and parent not in self._subagent_parent:
            raise AgentProtocolError(f"parentSubagentRunId {parent!r} was not announced")
        self._open_item("subagent", sid, None)
        self._subagent_parent[sid] = parent

    def _finish_subagent(self, event: SubagentFinishedEvent | SubagentErrorEvent) -> None:
        sid = event.subagent_run_id
        if _key("subagent", sid, None) not in self._open:
            raise AgentProtocolError(f"subagent {sid!r} finished but is not active")
        outcome = event.outcome if isinstance(event, SubagentFinishedEvent) else None
        if isinstance(outcome, SubagentFinishedSuccessOutcome) and outcome.model_extra:
            raise AgentProtocolError(f"subagent {sid!r} success outcome carries "
                                    f"{sorted(outcome.model_extra)}")
        del self._open[_key("subagent", sid, None)]
        self._subagents_done.add(sid)

    # ---- ending ----------------------------------------------------------

    def finish(self, ending: Ending) -> Terminal:
        """Decide the closing events and the single terminal event."""
        if self._ended:
            raise AgentProtocolError("the run already ended")
        if isinstance(ending, Failed):
            closing = tuple(self._close_all("error")) if ending.close_open else ()
            self._ended = True
            return Terminal(closing, RunErrorEvent(message=ending.message, code=ending.code,
                                              usage=self.usage()),
                            "error", tuple(self._carried.values()))
        if isinstance(ending, Cancelled):
            closing = tuple(self._close_all("cancelled"))
            self._ended = True
            return Terminal(closing, RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id,
                outcome=RunFinishedCancelledOutcome(), usage=self.usage()),
                "cancelled", tuple(self._carried.values()))
        interrupts = [*self._carried.values(), *self._raised.values()]
        if interrupts:
            closing = tuple(self._close_all("interrupt"))
            self._ended = True
            return Terminal(closing, RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id,
                outcome=RunFinishedInterruptOutcome(interrupts=interrupts), usage=self.usage()),
                "interrupt", tuple(interrupts))
        closing = tuple(self._close_all("success"))
        self._ended = True
        pending = self.pending_tool_calls()
        return Terminal(closing, RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id, result=ending.result,
            outcome=RunFinishedSuccessOutcome(pending_tool_call_ids=pending or None),
            usage=self.usage()), "success", ())

    def _close_all(self, why: Outcome) -> list[BaseEvent]:
        self._chunk.clear()
        out: list[BaseEvent] = []
        for item in reversed(list(self._open.values())):
            event = self._closing_event(item, why)
            self._track(event)
            out.append(event)
        return out

    def _closing_event(self, item: OpenItem, why: Outcome) -> BaseEvent:
        suspended_on = (self.suspension_of(item.id)
                        if why == "interrupt" and item.kind == "subagent" else None)
        return closing_event(item, why, suspended_on)
