"""Resume entries against what the runtime knows: answers, strangers, uncovered — pure.

A resuming input carries one ``ResumeEntry`` per interrupt it answers. The
runtime checks them against the interrupts it raised on the thread (its
checkpoint) and against the history (``messages``), as the seed's producer
error handling asks (digest rules 19-22):

* an entry naming an interrupt the runtime did not raise is *unrecognised*:
  the run proceeds without it and a warning is surfaced;
* an interrupt the runtime knows is open and that no entry covers is
  *uncovered*: it is never performed and never treated as abandoned — the
  runner either rejects the input or carries the interrupt into the run's
  interrupt outcome again (``AGUI_UNCOVERED_POLICY``);
* an approval-gated tool call in ``messages`` with neither a tool result nor
  an entry is uncovered too, even when no checkpoint remembers its
  interrupt: the runtime then stands for that interrupt under the
  deterministic id ``gated_interrupt_id(toolCallId)``, the id the sample
  approval agent raises it under, so an answer to it is recognised and its
  execution is keyed the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ag_ui.core import AssistantMessage, Interrupt, ResumeEntry, RunAgentInput, ToolMessage

APPROVAL_REASON = "tool_approval"


def gated_interrupt_id(tool_call_id: str) -> str:
    """The interrupt id that asks approval for tool call ``tool_call_id``."""
    return f"approve:{tool_call_id}"


@dataclass(frozen=True, slots=True)
class RunWarning:
    """Something the consumer should hear about, surfaced as a namespaced CUSTOM event."""

    code: str
    message: str
    interrupt_ids: tuple[str, ...] = ()

    def wire(self) -> dict[str, object]:
        """The CUSTOM event's ``value``."""
        value: dict[str, object] = {"code": self.code, "message": self.message}
        if self.interrupt_ids:
            value["interruptIds"] = list(self.interrupt_ids)
        return value


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What a run may act on, decided before it starts."""

    answers: dict[str, ResumeEntry] = field(default_factory=dict)
    """Recognised entries by interrupt id, in input order."""
    prior: dict[str, Interrupt] = field(default_factory=dict)
    """Every interrupt open on the thread before this run (answered or not)."""
    uncovered: tuple[Interrupt, ...] = ()
    """Open interrupts no entry answers: kept open, never performed."""
    warnings: tuple[RunWarning, ...] = ()


def pending_gated_calls(
    run_input: RunAgentInput, gated_tools: Iterable[str]
) -> list[tuple[str, str]]:
    """(toolCallId, tool name) of gated calls in ``messages`` that have no tool result."""
    gated = frozenset(gated_tools)
    if not gated:
        return []
    answered = {m.tool_call_id for m in run_input.messages if isinstance(m, ToolMessage)}
    return [
        (call.id, call.function.name)
        for m in run_input.messages
        if isinstance(m, AssistantMessage)
        for call in m.tool_calls or ()
        if call.function.name in gated and call.id not in answered
    ]


def plan_resume(
    run_input: RunAgentInput,
    open_interrupts: Sequence[Interrupt],
    *,
    gated_tools: Iterable[str] = (),
    dispatch_warnings: Sequence[str] = (),
) -> ResumePlan:
    """Sort the input's resume entries into answers and strangers; find the uncovered."""
    if not (open_interrupts or run_input.resume or dispatch_warnings or gated_tools):
        return ResumePlan()  # a fresh turn: nothing to answer, nothing open (most runs)
    prior = {i.id: i for i in open_interrupts}
    about_calls = {i.tool_call_id for i in open_interrupts if i.tool_call_id}
    for call_id, name in pending_gated_calls(run_input, gated_tools):
        if call_id in about_calls:
            continue
        stand_in = Interrupt(id=gated_interrupt_id(call_id), reason=APPROVAL_REASON,
                             tool_call_id=call_id,
                             message=f"Approve the call to {name} ({call_id})?")
        prior.setdefault(stand_in.id, stand_in)

    answers: dict[str, ResumeEntry] = {}
    unknown: list[str] = []
    duplicate: list[str] = []
    for entry in run_input.resume or ():
        if entry.interrupt_id in answers:
            duplicate.append(entry.interrupt_id)
        elif entry.interrupt_id in prior:
            answers[entry.interrupt_id] = entry
        else:
            unknown.append(entry.interrupt_id)

    warnings = [RunWarning("dispatch_warning", w) for w in dispatch_warnings]
    if unknown:
        warnings.append(RunWarning(
            "unknown_resume_entry",
            "resume entries name interrupts this agent did not raise on the thread; "
            "they were ignored", tuple(unknown)))
    if duplicate:
        warnings.append(RunWarning(
            "duplicate_resume_entry",
            "an interrupt was answered more than once; the first entry was used",
            tuple(duplicate)))
    uncovered = tuple(i for i in prior.values() if i.id not in answers)
    if uncovered:
        warnings.append(RunWarning(
            "uncovered_interrupts",
            "interrupts still open on the thread have no resume entry; they were not "
            "performed and stay open", tuple(i.id for i in uncovered)))
    return ResumePlan(answers, prior, uncovered, tuple(warnings))
