"""The runner's guarantees, whatever the agent does.

Each test runs one agent — most of them misbehaving on purpose — through the
runner into an in-memory sink, then checks the stream: RUN_STARTED first
(protocolVersion 1.0, input echoed), contiguous sequence numbers, everything
closed, exactly one terminal event with the right outcome, and no finding
from the ag-ui-validate conformance validator.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepStartedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallStartEvent,
)
from producer_support import (
    ListSink,
    assert_conformant,
    make_input,
    outcome_of,
    resolved,
    run_agent,
    runner_for,
)

from services.producer.context import WARNING_EVENT, RunContext
from services.producer.effects import MemoryLedger
from services.producer.errors import InterruptConflictError

pytestmark = pytest.mark.unit


def warnings_in(sink: ListSink) -> list[dict[str, Any]]:
    return [w["value"] for w in sink.wire if w["type"] == "CUSTOM" and w["name"] == WARNING_EVENT]


async def test_run_opens_with_its_own_run_started_echoing_the_input() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        await ctx.text("hi")

    run_input = make_input(forwarded_props={"x": 1})
    sink = await run_agent(agent, run_input)
    first = sink.wire[0]
    assert first["type"] == "RUN_STARTED"
    assert first["protocolVersion"] == "1.0"
    assert first["threadId"] == "thread-1"
    assert first["runId"] == "run-1"
    assert first["input"] == run_input.model_dump(mode="json", by_alias=True)
    assert all(isinstance(w["timestamp"], int) for w in sink.wire)
    assert outcome_of(sink) == {"type": "success"}
    assert_conformant(sink)


async def test_agent_that_yields_nothing_finishes_success() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[BaseEvent]:
        return
        yield  # pragma: no cover - makes this an async generator

    sink = await run_agent(agent)
    assert sink.types == ["RUN_STARTED", "RUN_FINISHED"]
    assert_conformant(sink)


async def test_coroutine_agent_result_is_reported_on_success() -> None:
    async def agent(inp: Any, ctx: RunContext) -> dict[str, int]:
        return {"answer": 42}

    sink = await run_agent(agent)
    assert sink.wire[-1]["result"] == {"answer": 42}
    assert_conformant(sink)


async def test_agent_raising_midway_ends_with_run_error_after_what_it_emitted() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        message = await ctx.start_message()
        await message.write("half a thought")
        raise RuntimeError("model provider unreachable")

    sink = await run_agent(agent)
    assert sink.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                          "RUN_ERROR"]
    assert sink.wire[-1]["code"] == "agent_error"
    assert "model provider unreachable" in sink.wire[-1]["message"]
    assert sink.report is not None
    assert sink.report.outcome == "error"
    assert_conformant(sink)


async def test_items_left_open_are_closed_innermost_first_before_success() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[BaseEvent]:
        yield StepStartedEvent(step_name="plan")
        yield TextMessageStartEvent(message_id="m1", role="assistant")
        yield TextMessageContentEvent(message_id="m1", delta="thinking")
        yield ToolCallStartEvent(tool_call_id="c1", tool_call_name="search")
        yield SubagentStartedEvent(subagent_run_id="s1", name="helper")

    sink = await run_agent(agent)
    assert sink.types[-5:] == ["SUBAGENT_FINISHED", "TOOL_CALL_END", "TEXT_MESSAGE_END",
                               "STEP_FINISHED", "RUN_FINISHED"]
    assert outcome_of(sink) == {"type": "success", "pendingToolCallIds": ["c1"]}
    assert_conformant(sink)


async def test_the_same_interrupt_twice_is_one_interrupt() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        ctx.interrupt("approval", id="i1", message="ok?")
        ctx.interrupt("approval", id="i1", message="ok?")

    sink = await run_agent(agent)
    assert [i["id"] for i in outcome_of(sink)["interrupts"]] == ["i1"]
    assert_conformant(sink)


async def test_two_different_interrupts_under_one_id_fail_the_run() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        ctx.interrupt("approval", id="i1", message="delete a?")
        ctx.interrupt("approval", id="i1", message="delete b?")

    sink = await run_agent(agent)
    assert sink.wire[-1]["type"] == "RUN_ERROR"
    assert sink.wire[-1]["code"] == "duplicate_interrupt_id"
    assert_conformant(sink)


async def test_an_agent_may_catch_the_conflict_and_carry_on() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        ctx.interrupt("approval", id="i1")
        with pytest.raises(InterruptConflictError):
            ctx.interrupt("other", id="i1")

    sink = await run_agent(agent)
    assert [i["reason"] for i in outcome_of(sink)["interrupts"]] == ["approval"]


async def test_yielded_interrupt_outcome_with_conflicting_ids_fails() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[BaseEvent]:
        yield RunFinishedEvent(thread_id="thread-1", run_id="run-1",
                               outcome=RunFinishedInterruptOutcome(interrupts=[
                                   Interrupt(id="x", reason="a"), Interrupt(id="x", reason="b")]))

    sink = await run_agent(agent)
    assert sink.wire[-1]["code"] == "duplicate_interrupt_id"
    assert_conformant(sink)


async def test_success_with_an_interrupt_open_becomes_the_interrupt_outcome() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[BaseEvent]:
        ctx.interrupt("approval", id="i1")
        yield RunFinishedEvent(thread_id="thread-1", run_id="run-1",
                               outcome=RunFinishedSuccessOutcome(), result="done")

    sink = await run_agent(agent)
    outcome = outcome_of(sink)
    assert outcome["type"] == "interrupt"
    assert [i["id"] for i in outcome["interrupts"]] == ["i1"]
    assert sink.report is not None
    assert [i.id for i in sink.report.open_interrupts] == ["i1"]
    assert_conformant(sink)


async def test_success_outcome_carrying_interrupts_is_refused() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "RUN_FINISHED", "threadId": "thread-1", "runId": "run-1",
               "outcome": {"type": "success", "interrupts": [{"id": "i", "reason": "r"}]}}

    sink = await run_agent(agent)
    assert sink.types == ["RUN_STARTED", "RUN_ERROR"]
    assert sink.wire[-1]["code"] == "protocol_violation"


async def test_success_never_hides_an_uncovered_interrupt_from_an_earlier_run() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        assert [i.id for i in ctx.uncovered] == ["old"]
        await ctx.text("doing only what was answered")

    sink = await run_agent(agent, make_input(resume=[resolved("other")]),
                           open_interrupts=[Interrupt(id="old", reason="approval"),
                                            Interrupt(id="other", reason="approval")])
    assert [i["id"] for i in outcome_of(sink)["interrupts"]] == ["old"]
    assert any(w["code"] == "uncovered_interrupts" for w in warnings_in(sink))
    assert_conformant(sink)


async def test_reject_policy_opens_the_stream_with_run_error() -> None:
    ran = False

    async def agent(inp: Any, ctx: RunContext) -> None:
        nonlocal ran
        ran = True

    sink = await run_agent(agent, make_input(resume=[resolved("b")]), policy="reject",
                           open_interrupts=[Interrupt(id="a", reason="r"),
                                            Interrupt(id="b", reason="r")])
    assert not ran
    assert sink.types == ["RUN_ERROR"]
    assert sink.wire[0]["code"] == "uncovered_interrupts"
    assert "a" in sink.wire[0]["message"]
    assert sink.report is not None
    assert [i.id for i in sink.report.open_interrupts] == ["a", "b"]
    assert_conformant(sink)


async def test_unknown_resume_entries_are_ignored_with_a_namespaced_warning() -> None:
    seen: dict[str, Any] = {}

    async def agent(inp: Any, ctx: RunContext) -> None:
        seen.update(ctx.answers)

    sink = await run_agent(agent, make_input(resume=[resolved("ghost")]),
                           dispatch_warnings=["lenient: entry ghost forwarded"])
    assert seen == {}
    codes = [w["code"] for w in warnings_in(sink)]
    assert codes == ["dispatch_warning", "unknown_resume_entry"]
    assert warnings_in(sink)[1]["interruptIds"] == ["ghost"]
    assert outcome_of(sink) == {"type": "success"}
    assert_conformant(sink)


async def test_cancel_mid_run_closes_open_items_and_finishes_cancelled() -> None:
    started = asyncio.Event()

    async def agent(inp: Any, ctx: RunContext) -> None:
        message = await ctx.start_message()
        await message.write("working")
        ctx.interrupt("never-delivered", id="i9")
        started.set()
        await asyncio.sleep(30)

    runner, sink = runner_for(agent)
    task = asyncio.create_task(runner.run())
    await started.wait()
    runner.cancel()
    report = await task
    assert report.outcome == "cancelled"
    assert sink.types[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert outcome_of(sink) == {"type": "cancelled"}
    assert_conformant(sink)


async def test_agent_ignoring_cancellation_is_abandoned_and_nothing_it_emits_leaks() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    after_cancel: list[str] = []

    async def agent(inp: Any, ctx: RunContext) -> None:
        async with ctx.subagent("stubborn") as sub:
            started.set()
            while not release.is_set():
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    after_cancel.append("swallowed")
                    try:
                        await sub.text("still here")
                    except BaseException:
                        after_cancel.append("refused")

    runner, sink = runner_for(agent, grace_s=0.1)
    task = asyncio.create_task(runner.run())
    await started.wait()
    runner.cancel()
    report = await asyncio.wait_for(task, timeout=5)
    release.set()  # let the abandoned agent end, or it would outlive the test loop
    assert report.outcome == "cancelled"
    assert "refused" in after_cancel
    assert "still here" not in b"".join(r.value for r in sink.records).decode()
    assert sink.types[-2:] == ["SUBAGENT_ERROR", "RUN_FINISHED"]
    assert_conformant(sink)


async def test_cancel_before_the_run_starts_still_opens_and_cancels() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        await asyncio.sleep(30)

    runner, sink = runner_for(agent)
    runner.cancel()
    await runner.run()
    assert sink.types == ["RUN_STARTED", "RUN_FINISHED"]
    assert outcome_of(sink) == {"type": "cancelled"}


async def test_invalid_event_is_never_published() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[Any]:
        yield {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "robot"}

    sink = await run_agent(agent)
    assert sink.types == ["RUN_STARTED", "RUN_ERROR"]
    assert sink.wire[-1]["code"] == "invalid_event"
    assert_conformant(sink)


async def test_lifecycle_violation_fails_the_run() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[BaseEvent]:
        yield TextMessageContentEvent(message_id="never-started", delta="x")

    sink = await run_agent(agent)
    assert sink.wire[-1]["code"] == "protocol_violation"
    assert_conformant(sink)


async def test_agent_run_lifecycle_events_are_interpreted() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[BaseEvent]:
        yield RunStartedEvent(thread_id="x", run_id="y")
        yield CustomEvent(name="acme.note", value=1)
        yield RunErrorEvent(message="quota exceeded", code="quota")
        yield CustomEvent(name="acme.after", value=2)

    sink = await run_agent(agent)
    assert sink.types == ["RUN_STARTED", "CUSTOM", "RUN_ERROR"]
    assert sink.wire[0]["threadId"] == "thread-1"
    assert sink.wire[-1] == {**sink.wire[-1], "message": "quota exceeded", "code": "quota"}


async def test_frontend_tool_call_left_for_the_application_is_pending() -> None:
    seen: list[list[str]] = []

    async def agent(inp: Any, ctx: RunContext) -> None:
        await ctx.tool_call("search", {"q": "x"}, tool_call_id="backend")
        await ctx.tool_result("backend", "found")
        await ctx.tool_call("confirm_with_user", {"text": "ok?"}, tool_call_id="front")
        seen.append(ctx.pending_frontend_tools)

    sink = await run_agent(agent, make_input(tools=["confirm_with_user"]))
    assert seen == [["front"]]
    assert outcome_of(sink) == {"type": "success", "pendingToolCallIds": ["front"]}
    assert_conformant(sink)


async def test_usage_is_this_runs_own_aggregated_and_absent_when_unreported() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        for n in (10, 5):
            ctx.usage(TokenUsage(provider="p", model="m", input_tokens=n, output_tokens=1,
                                 total_tokens=n + 1))

    sink = await run_agent(agent)
    assert sink.wire[-1]["usage"] == [{"provider": "p", "model": "m", "inputTokens": 15,
                                       "outputTokens": 2, "totalTokens": 17}]

    async def silent(inp: Any, ctx: RunContext) -> None:
        return None

    assert "usage" not in (await run_agent(silent)).wire[-1]


async def test_text_chunks_become_an_explicit_message() -> None:
    async def agent(inp: Any, ctx: RunContext) -> AsyncIterator[BaseEvent]:
        yield TextMessageChunkEvent(message_id="m1", delta="Hel")
        yield TextMessageChunkEvent(delta="lo")
        yield TextMessageChunkEvent(message_id="m2", delta="!")

    sink = await run_agent(agent)
    assert sink.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                          "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TEXT_MESSAGE_START",
                          "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert_conformant(sink)


async def test_subagent_error_caught_by_the_parent_does_not_fail_the_run() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        try:
            async with ctx.subagent("flaky") as sub:
                await sub.text("trying")
                raise ValueError("tool broke")
        except ValueError:
            await ctx.text("recovered")

    sink = await run_agent(agent)
    errors = [w for w in sink.wire if w["type"] == "SUBAGENT_ERROR"]
    assert errors
    assert errors[0]["message"] == "tool broke"
    assert outcome_of(sink) == {"type": "success"}
    assert_conformant(sink)


async def test_effect_runs_once_per_key_across_runs() -> None:
    ledger = MemoryLedger()
    performed: list[str] = []

    async def agent(inp: Any, ctx: RunContext) -> None:
        async def act() -> str:
            performed.append(ctx.run_id)
            return "deleted"

        effect = await ctx.effect("approval-1", act)
        ctx.finish({"status": effect.status, "result": effect.result})

    first = await run_agent(agent, make_input(run_id="r1"), ledger=ledger)
    second = await run_agent(agent, make_input(run_id="r2"), ledger=ledger)
    assert performed == ["r1"]
    assert first.wire[-1]["result"] == {"status": "performed", "result": "deleted"}
    assert second.wire[-1]["result"] == {"status": "already_performed", "result": "deleted"}


async def test_effect_without_a_ledger_fails_the_run() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        async def act() -> None:
            return None

        await ctx.effect("k", act)

    sink = await run_agent(agent)
    assert sink.wire[-1]["code"] == "agent_error"


async def test_a_result_that_is_not_json_ends_with_run_error() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        ctx.finish(object())

    sink = await run_agent(agent)
    assert sink.types[-1] == "RUN_ERROR"
    assert_conformant(sink)


async def test_slow_sink_holds_the_agent_and_keeps_order() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        message = await ctx.start_message(message_id="m")
        for i in range(200):
            await message.write(str(i))

    sink = await run_agent(agent, sink=ListSink(delay_s=0.0005), queue_limit=8)
    deltas = [w["delta"] for w in sink.wire if w["type"] == "TEXT_MESSAGE_CONTENT"]
    assert deltas == [str(i) for i in range(200)]
    assert_conformant(sink)


async def test_abort_ends_the_run_with_run_error_whatever_is_open() -> None:
    started = asyncio.Event()

    async def agent(inp: Any, ctx: RunContext) -> None:
        message = await ctx.start_message()
        await message.write("long job")
        started.set()
        await asyncio.sleep(30)

    runner, sink = runner_for(agent)
    task = asyncio.create_task(runner.run())
    await started.wait()
    runner.abort("the worker stopped", "worker_stopped")
    report = await task
    assert report.outcome == "error"
    assert sink.types[-1] == "RUN_ERROR"
    assert sink.wire[-1]["code"] == "worker_stopped"
    assert_conformant(sink)


async def test_each_effect_is_announced_with_its_status() -> None:
    async def agent(inp: Any, ctx: RunContext) -> None:
        async def act() -> int:
            return 1

        await ctx.effect("k1", act)
        await ctx.effect("k1", act)

    sink = await run_agent(agent, ledger=MemoryLedger())
    effects = [w["value"] for w in sink.wire
               if w["type"] == "CUSTOM" and w["name"] == "agui-relay.effect"]
    assert effects == [{"key": "k1", "status": "performed"},
                       {"key": "k1", "status": "already_performed"}]
