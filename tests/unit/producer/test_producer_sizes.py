"""A run never writes a record the broker would refuse: it ends with a RUN_ERROR saying why.

Each test runs an agent through the runner into an in-memory sink and checks
the stream: the record that would not fit is not there, what the run had
open is closed, the RUN_ERROR's code names the limit, and the stream stays
conformant (ag-ui-validate).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ag_ui.core import BaseEvent, Interrupt, TextMessageContentEvent, TextMessageStartEvent
from producer_support import ListSink, assert_conformant, make_input, runner_for

from contracts.headers import AGENT, EVENT_TYPE, RUN_ID, SCHEMA, SEQ, TRACEPARENT
from contracts.limits import InputLimits, outcome_limits
from services.kafka.clients import KafkaError
from services.kafka.sizing import record_size
from services.producer.bookkeeping import Failed
from services.producer.context import RunContext
from services.producer.errors import RecordTooLargeError
from services.producer.sizes import (
    RecordGuard,
    RunLimits,
    interrupt_failure,
    send_failure,
)

pytestmark = pytest.mark.unit

MIB = 1_048_576


def error_of(sink: ListSink) -> dict[str, Any]:
    last = sink.wire[-1]
    assert last["type"] == "RUN_ERROR", last
    return last


async def big_text(_: Any, ctx: RunContext) -> None:
    async with ctx.start_message() as message:
        await message.write("small")
        await message.write("x" * 1_100_000)
        await message.write("never")  # the run stopped taking events


async def test_an_event_over_the_record_limit_ends_the_run_event_too_large() -> None:
    runner, sink = runner_for(big_text)
    await runner.run()
    assert sink.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                          "TEXT_MESSAGE_END", "RUN_ERROR"]
    error = error_of(sink)
    assert error["code"] == "event_too_large"
    assert "TEXT_MESSAGE_CONTENT" in error["message"]
    assert "1100" in error["message"]
    assert str(MIB) in error["message"]
    assert max(len(r.value) for r in sink.records) < 1000
    assert_conformant(sink)


def test_the_agent_task_a_refused_event_aborted_leaves_no_exception_unretrieved() -> None:
    """Its ending is the refusal; the agent's RunAborted was once left for the loop to log
    as "Task exception was never retrieved", a traceback for input the limits document.
    A loop of its own: the task is reported when it is collected, after the run."""

    async def one_run() -> ListSink:
        runner, sink = runner_for(big_text)
        await runner.run()
        return sink

    lost: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _, context: lost.append(context))
    try:
        sink = loop.run_until_complete(one_run())
    finally:
        loop.close()
    gc.collect()
    assert error_of(sink)["code"] == "event_too_large"
    assert [c["message"] for c in lost] == []


async def yielding_big_content(_: Any, __: RunContext) -> AsyncIterator[BaseEvent]:
    yield TextMessageStartEvent(message_id="m1", role="assistant")
    yield TextMessageContentEvent(message_id="m1", delta="y" * 1_100_000)


async def test_a_yielded_event_over_the_limit_is_dropped_and_its_message_closed() -> None:
    runner, sink = runner_for(yielding_big_content)
    await runner.run()
    assert sink.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "RUN_ERROR"]
    assert error_of(sink)["code"] == "event_too_large"
    assert_conformant(sink)


async def test_the_room_counts_key_and_headers_of_the_run() -> None:
    limits = RunLimits(max_record_bytes=16_384)

    async def sized(_: Any, ctx: RunContext) -> None:
        await ctx.text("z" * 15_000)

    long_ids = make_input("t" * 600, "r" * 600)
    runner, sink = runner_for(sized, long_ids, limits=limits)
    await runner.run()
    assert error_of(sink)["code"] == "event_too_large"  # value fits, value + ids do not
    short, sink2 = runner_for(sized, limits=limits)
    await short.run()
    assert sink2.types[-1] == "RUN_FINISHED"


def test_an_event_within_the_room_fits_with_the_largest_headers_of_its_run() -> None:
    limits = RunLimits(max_record_bytes=20_000)
    room = limits.event_room("thread", "run", "agent")
    headers = [(RUN_ID, b"run"), (EVENT_TYPE, b"TEXT_MESSAGE_CONTENT"), (AGENT, b"agent"),
               (SEQ, str(10**12).encode()), (SCHEMA, b"1"), (TRACEPARENT, b"0" * 55)]
    assert record_size(b"thread", b"v" * room, headers) <= 20_000
    assert room > 20_000 - 400  # not much more than what headers take


async def test_run_started_too_large_for_its_echo_is_sent_without_it() -> None:
    async def hello(_: Any, ctx: RunContext) -> None:
        await ctx.text("hi")

    run_input = make_input(forwarded_props={"blob": "b" * 20_000})
    runner, sink = runner_for(hello, run_input, limits=RunLimits(max_record_bytes=16_384))
    await runner.run()
    assert "input" not in sink.wire[0]
    assert sink.types[-1] == "RUN_FINISHED"
    assert_conformant(sink)


async def test_a_result_too_large_for_its_run_finished_ends_event_too_large() -> None:
    async def huge_result(_: Any, ctx: RunContext) -> None:
        ctx.finish({"blob": "r" * 1_100_000})

    runner, sink = runner_for(huge_result)
    await runner.run()
    assert sink.types == ["RUN_STARTED", "RUN_ERROR"]
    error = error_of(sink)
    assert error["code"] == "event_too_large"
    assert "RUN_FINISHED" in error["message"]
    assert_conformant(sink)


def nested(levels: int) -> Any:
    """JSON nested ``levels`` deep (a list in a list ...)."""
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


async def test_an_interrupt_nested_past_the_depth_limit_ends_the_run_not_the_thread() -> None:
    """An end the gatekeeper would dead-letter (recording the run failed, nothing open) is
    refused here: the client never sees an interrupt that could not be answered."""
    async def asks(_: Any, ctx: RunContext) -> None:
        ctx.raise_interrupt(Interrupt(id="deep-1", reason="approve",
                                      response_schema={"schema": nested(100)}))

    runner, sink = runner_for(asks)
    report = await runner.run()
    assert sink.types == ["RUN_STARTED", "RUN_ERROR"]
    error = error_of(sink)
    assert error["code"] == "invalid_event"
    assert "nested deeper than 64" in error["message"]
    assert "outcome/interrupts/0/responseSchema" in error["message"]
    assert report.outcome == "error"
    assert report.open_interrupts == ()
    assert_conformant(sink)


async def test_a_result_is_held_to_the_depth_limit_the_gatekeeper_holds_a_runs_end_to(
        ) -> None:
    """Around the limit, the worker publishes a RUN_FINISHED exactly when the gatekeeper's
    check of a run's end (``outcome_limits``) accepts it."""
    endings = []
    for levels in range(58, 67):
        async def finishes(_: Any, ctx: RunContext, levels: int = levels) -> None:
            ctx.finish({"r": nested(levels)})

        runner, sink = runner_for(finishes)
        await runner.run()
        last = sink.records[-1]
        if last.event_type == "RUN_FINISHED":
            assert outcome_limits(last.value, InputLimits()) is None, levels
        else:
            error = error_of(sink)
            assert error["code"] == "invalid_event", error
            assert "nested deeper than 64 levels (at result/r/" in error["message"]
        endings.append(last.event_type)
    assert endings[0] == "RUN_FINISHED"
    assert endings[-1] == "RUN_ERROR"
    assert endings == sorted(endings, key=lambda kind: kind == "RUN_ERROR")  # one edge


def many(count: int, **fields: Any) -> list[Interrupt]:
    return [Interrupt(id=f"i-{n}", reason="approve", **fields) for n in range(count)]


async def test_interrupts_over_a_quarter_record_end_interrupts_too_large() -> None:
    async def asks(_: Any, ctx: RunContext) -> None:
        await ctx.text("open")
        for interrupt in many(50, message="m" * 6_000):  # 300 KB > 1 MiB / 4
            ctx.raise_interrupt(interrupt)

    runner, sink = runner_for(asks)
    report = await runner.run()
    error = error_of(sink)
    assert error["code"] == "interrupts_too_large"
    assert "50 interrupts" in error["message"]
    assert str(MIB // 4) in error["message"]
    assert report.outcome == "error"
    assert report.open_interrupts == ()
    assert_conformant(sink)


@pytest.mark.parametrize(("count", "code"), [(256, None), (257, "interrupts_too_large")])
async def test_no_run_ends_with_more_open_interrupts_than_one_resume_may_answer(
        count: int, code: str | None) -> None:
    """A resume names every open interrupt and the consumer service takes at most
    AGUI_MAX_RESUME_ENTRIES (256) entries: a run that ended with 300 had left a thread no
    client could ever resume (found by probing)."""
    async def asks(_: Any, ctx: RunContext) -> None:
        for interrupt in many(count):
            ctx.raise_interrupt(interrupt)

    runner, sink = runner_for(asks)
    report = await runner.run()
    if code is None:
        assert report.outcome == "interrupt"
        assert len(report.open_interrupts) == count
        return
    error = error_of(sink)
    assert error["code"] == code
    assert f"{count} open interrupts, more than the 256" in error["message"]
    assert report.open_interrupts == ()
    assert_conformant(sink)


@pytest.mark.parametrize("fields", [{"id": "i" * 257}, {"tool_call_id": "c" * 257}])
async def test_an_interrupt_id_over_the_id_limit_ends_invalid_interrupt(
        fields: dict[str, Any]) -> None:
    async def asks(_: Any, ctx: RunContext) -> None:
        ctx.raise_interrupt(Interrupt(**{"id": "ok", "reason": "approve", **fields}))

    runner, sink = runner_for(asks)
    await runner.run()
    error = error_of(sink)
    assert error["code"] == "invalid_interrupt"
    assert "257" in error["message"]
    assert "AGUI_MAX_ID_LENGTH" in error["message"]
    assert_conformant(sink)


async def test_an_interrupt_holding_too_many_objects_and_arrays_ends_invalid_interrupt(
        ) -> None:
    """Open interrupts are written again with every thread state, listed and notified, by
    pydantic at about a microsecond per array: 260 KB of nested metadata took the
    gatekeeper 0.38 s per decision on its thread and ``GET /threads`` 1 s (found by
    review). Past ``AGUI_MAX_JSON_CONTAINERS`` the run ends ``invalid_interrupt``, found
    before anything writes them."""
    async def asks(_: Any, ctx: RunContext) -> None:
        ctx.raise_interrupt(Interrupt(id="ok", reason="approve", metadata={"a": [[]] * 40_000}))

    runner, sink = runner_for(asks)
    report = await runner.run()
    error = error_of(sink)
    assert error["code"] == "invalid_interrupt"
    assert "more than 32768 objects and arrays" in error["message"]
    assert "AGUI_MAX_JSON_CONTAINERS" in error["message"]
    assert report.open_interrupts == ()
    assert_conformant(sink)


async def test_an_interrupt_expiring_at_no_date_ends_invalid_interrupt() -> None:
    """An ``expiresAt`` longer than a date: every reader parses it as V8 does, in time
    growing with its length, so the worker refuses it as it refuses a long id."""
    async def asks(_: Any, ctx: RunContext) -> None:
        ctx.raise_interrupt(Interrupt(id="ok", reason="approve",
                                      expires_at="2026-01-01T00:00:00Z" + " " * 100_000))

    runner, sink = runner_for(asks)
    report = await runner.run()
    error = error_of(sink)
    assert error["code"] == "invalid_interrupt"
    assert "expiresAt is 100020 characters long" in error["message"]
    assert report.open_interrupts == ()
    assert_conformant(sink)


def test_interrupt_checks_are_pure_and_accept_what_fits() -> None:
    limits = RunLimits(max_record_bytes=MIB, ids=InputLimits(max_id_length=10))
    assert interrupt_failure(many(3), limits) is None
    failed = interrupt_failure([Interrupt(id="x" * 11, reason="r")], limits)
    assert failed is not None
    assert failed.code == "invalid_interrupt"
    assert failed.close_open
    assert interrupt_failure(many(3, message="m" * 100),
                             RunLimits(max_record_bytes=1024)) is not None


async def test_a_sink_refusing_the_end_ends_the_run_with_its_code() -> None:
    async def asks(_: Any, ctx: RunContext) -> None:
        ctx.raise_interrupt(Interrupt(id="a", reason="approve"))

    refusal = Failed("the checkpoint would be 2000000 bytes", "checkpoint_too_large")
    runner, sink = runner_for(asks, sink=ListSink(refuse=refusal))
    report = await runner.run()
    assert sink.types == ["RUN_STARTED", "RUN_ERROR"]
    assert error_of(sink)["code"] == "checkpoint_too_large"
    assert report.outcome == "error"
    assert report.terminal.seq == 1
    assert_conformant(sink)


class FailingSink(ListSink):
    """Refuses the n-th record with ``exc`` (what a producer's send may raise)."""

    def __init__(self, at: int, exc: Exception) -> None:
        super().__init__()
        self.at, self.exc = at, exc

    async def send(self, record: Any) -> None:
        if len(self.records) == self.at:
            self.at = -1
            raise self.exc
        await super().send(record)


@pytest.mark.parametrize(("exc", "code"), [
    (RecordTooLargeError("too large", "event_too_large", 2 * MIB), "event_too_large"),
    (KafkaError("broker said no"), "publish_failed"),
])
async def test_a_send_failing_ends_the_run_with_run_error_instead_of_raising(
        exc: Exception, code: str) -> None:
    async def talks(_: Any, ctx: RunContext) -> None:
        await ctx.text("hello there")

    runner, sink = runner_for(talks, sink=FailingSink(2, exc))
    report = await runner.run()
    assert report.outcome == "error"
    assert error_of(sink)["code"] == code
    assert sink.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "RUN_ERROR"]


def test_send_failure_names_a_broker_size_refusal() -> None:
    class MessageSizeTooLargeError(KafkaError):  # aiokafka's has errno 10
        errno = 10

    assert send_failure(MessageSizeTooLargeError()).code == "event_too_large"
    assert send_failure(RuntimeError()).code == "publish_failed"


def test_the_guard_raises_with_the_code_and_size() -> None:
    guard = RecordGuard.of(2048)
    guard.check("small", "event_too_large", b"k", b"v" * 100)
    with pytest.raises(RecordTooLargeError) as caught:
        guard.check("the thing", "checkpoint_too_large", b"k" * 1000, b"v" * 1000)
    assert caught.value.code == "checkpoint_too_large"
    assert caught.value.size > 2048
    assert "the thing" in caught.value.message
    assert "2048" in caught.value.message
