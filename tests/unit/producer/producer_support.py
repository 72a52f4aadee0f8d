"""Helpers for the producer unit tests: an in-memory sink, inputs, conformance checks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson
from ag_ui.core import Interrupt, ResumeEntry, RunAgentInput, Tool, UserMessage
from ag_ui_validate.pytest_plugin import validate_agui

from services.agui.transcript import replay
from services.producer.agent import AgentDefinition, as_definition
from services.producer.bookkeeping import Failed
from services.producer.effects import EffectLedger
from services.producer.resume import plan_resume
from services.producer.runner import EventRecord, Runner, RunOptions, RunReport
from services.producer.sizes import RunLimits

TERMINALS = ("RUN_FINISHED", "RUN_ERROR")


class ListSink:
    """Collects a run's records in publish order."""

    def __init__(self, delay_s: float = 0.0, refuse: Failed | None = None) -> None:
        self.records: list[EventRecord] = []
        self.report: RunReport | None = None
        self.delay_s = delay_s
        self.refuse = refuse
        """What ``refusal`` answers for a terminal event that is not a RUN_ERROR."""

    async def send(self, record: EventRecord) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.records.append(record)

    async def send_terminal(self, record: EventRecord, report: RunReport) -> None:
        self.records.append(record)
        self.report = report

    def refusal(self, report: RunReport) -> Failed | None:
        return self.refuse if report.terminal.event_type != "RUN_ERROR" else None

    @property
    def wire(self) -> list[dict[str, Any]]:
        return [orjson.loads(r.value) for r in self.records]

    @property
    def types(self) -> list[str]:
        return [r.event_type for r in self.records]


def make_input(
    thread_id: str = "thread-1",
    run_id: str = "run-1",
    *,
    resume: Sequence[ResumeEntry] | None = None,
    tools: Sequence[str] = (),
    messages: Sequence[Any] | None = None,
    forwarded_props: Any = None,
) -> RunAgentInput:
    return RunAgentInput(
        thread_id=thread_id, run_id=run_id,
        messages=list(messages) if messages is not None
        else [UserMessage(id="u1", content="hello")],
        resume=list(resume) if resume is not None else None,
        tools=[Tool(name=t, description=t) for t in tools] or None,
        forwarded_props=forwarded_props,
    )


def resolved(interrupt_id: str, payload: Any = None) -> ResumeEntry:
    return ResumeEntry(interrupt_id=interrupt_id, status="resolved", payload=payload)


def cancelled(interrupt_id: str) -> ResumeEntry:
    return ResumeEntry(interrupt_id=interrupt_id, status="cancelled")


def runner_for(
    agent: AgentDefinition | Callable[..., Any],
    run_input: RunAgentInput | None = None,
    *,
    open_interrupts: Sequence[Interrupt] = (),
    policy: str = "reinterrupt",
    ledger: EffectLedger | None = None,
    grace_s: float = 0.2,
    dispatch_warnings: Sequence[str] = (),
    sink: ListSink | None = None,
    queue_limit: int = 256,
    limits: RunLimits | None = None,
    request_id: str | None = None,
    principal: str | None = None,
    interrupt_ttl: timedelta | None = None,
    clock: Callable[[], datetime] | None = None,
) -> tuple[Runner, ListSink]:
    definition = as_definition(agent)
    run_input = run_input or make_input()
    plan = plan_resume(run_input, open_interrupts, gated_tools=definition.gated_tools,
                       dispatch_warnings=dispatch_warnings)
    sink = sink or ListSink()
    options = RunOptions(uncovered_policy=policy, cancel_grace_s=grace_s,  # type: ignore[arg-type]
                         queue_limit=queue_limit, limits=limits or RunLimits(),
                         interrupt_ttl=interrupt_ttl, **({"clock": clock} if clock else {}))
    return Runner(definition, run_input, plan, sink, options=options, ledger=ledger,
                  request_id=request_id, principal=principal), sink


async def run_agent(agent: AgentDefinition | Callable[..., Any],
                    run_input: RunAgentInput | None = None, **kw: Any) -> ListSink:
    runner, sink = runner_for(agent, run_input, **kw)
    await runner.run()
    return sink


def assert_conformant(sink: ListSink) -> None:
    """Our run guarantees plus the ag-ui-validate conformance validator (0 findings)."""
    types = sink.types
    assert [r.seq for r in sink.records] == list(range(len(types))), "seq not 0..n-1"
    assert types[0] in ("RUN_STARTED", "RUN_ERROR")
    assert sum(t in TERMINALS for t in types) == 1, types
    assert types[-1] in TERMINALS
    assert sink.report is not None
    assert sink.report.terminal is sink.records[-1]
    if types[-1] == "RUN_FINISHED":
        outcome = sink.wire[-1].get("outcome", {})
        if outcome.get("type") == "interrupt":
            ids = [i["id"] for i in outcome["interrupts"]]
            assert ids
            assert len(ids) == len(set(ids))
    overrides = {"AGUI001": "off"} if types[0] == "RUN_ERROR" else None
    report = validate_agui([r.value.decode() for r in sink.records],
                           severity_overrides=overrides)
    findings = [(d.rule, d.message) for d in report.diagnostics if d.severity != "info"]
    assert not findings, findings


def outcome_of(sink: ListSink) -> dict[str, Any]:
    last = sink.wire[-1]
    assert last["type"] == "RUN_FINISHED", last
    return dict(last.get("outcome", {"type": "success"}))


def resume_input(previous: ListSink, run_id: str, resume: Sequence[ResumeEntry],
                 **extra: Any) -> RunAgentInput:
    """The next input a consumer would send after ``previous``: its history plus ``resume``."""
    transcript = replay(previous.wire)
    return RunAgentInput.model_validate({
        **transcript.input_fields(), "threadId": previous.wire[0]["threadId"], "runId": run_id,
        "resume": [e.model_dump(mode="json", by_alias=True) for e in resume], **extra})
