"""``agui-relay resume`` against the real broker; the test plays gatekeeper and producer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ag_ui.core import Interrupt
from ops_support import Writer, end_offset_total, run_cli, wait_for_records

from contracts import RunRequest, decode
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}},
            "required": ["approved"]}
USER = {"id": "u1", "role": "user", "content": "clean up"}


async def interrupted_thread(writer: Writer, thread: str, *, expired: bool = False) -> None:
    """A thread whose run-1 asked for approval of a tool call and for a note."""
    run = "run-1"
    given = {"threadId": thread, "runId": run, "messages": [USER],
             "state": {"files": ["a", "b"]}, "forwardedProps": {"origin": "test"}}
    await writer.event(thread, run, {"type": "RUN_STARTED", "threadId": thread, "runId": run,
                                     "input": given}, agent="approval")
    for body in (
        {"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "Deleting two files."},
        {"type": "TEXT_MESSAGE_END", "messageId": "a1"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "delete_files",
         "parentMessageId": "a1"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"paths":["a","b"]}'},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/confirmed", "value": False}]},
    ):
        await writer.event(thread, run, body, agent="approval")
    expires = "2020-01-01T00:00:00Z" if expired else "2999-01-01T00:00:00Z"
    interrupts = [Interrupt(id="approve-1", reason="tool_approval", tool_call_id="c1",
                            response_schema=APPROVAL, expires_at=expires),
                  Interrupt(id="note-2", reason="note")]
    await writer.event(thread, run, {
        "type": "RUN_FINISHED", "threadId": thread, "runId": run,
        "outcome": {"type": "interrupt", "interrupts": [
            i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in interrupts]}},
        agent="approval")
    await writer.interrupted(thread, run, interrupts, agent="approval")


async def next_request(settings: KafkaSettings, thread: str) -> RunRequest:
    (record,) = await wait_for_records(settings, settings.topics.requests, thread)
    return decode(RunRequest, record.value)


async def test_resume_builds_the_full_input_prints_decision_and_follows_the_run(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await interrupted_thread(writer, "t-r")
    cli = asyncio.create_task(run_cli(
        ops_settings, "resume", "t-r", "--resolve", 'approve-1={"approved": true}',
        "--cancel", "note-2", "--json"))
    request = await next_request(ops_settings, "t-r")
    run_input = request.input
    assert request.agent == "approval"
    assert run_input.thread_id == "t-r"
    assert run_input.run_id != "run-1"
    wire: dict[str, Any] = run_input.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["messages"] == [USER, {
        "id": "a1", "role": "assistant", "content": "Deleting two files.",
        "toolCalls": [{"id": "c1", "type": "function", "function": {
            "name": "delete_files", "arguments": '{"paths":["a","b"]}'}}]}]
    assert wire["state"] == {"files": ["a", "b"], "confirmed": False}
    assert wire["forwardedProps"] == {"origin": "test"}
    assert wire["resume"] == [
        {"interruptId": "approve-1", "status": "resolved", "payload": {"approved": True}},
        {"interruptId": "note-2", "status": "cancelled"}]

    # Another request's decision on the same thread is not ours; a queued one is shown and
    # waited past; then the admission and the run.
    await writer.decision("t-r", "someone-else", "rejected", code="thread_busy", message="busy")
    await writer.decision("t-r", request.request_id, "queued", run=run_input.run_id,
                          message="held until run-0 ends", agent="approval")
    await writer.decision("t-r", request.request_id, "admitted", run=run_input.run_id,
                          agent="approval")
    await writer.event("t-r", "unrelated-run", {"type": "RUN_STARTED", "threadId": "t-r",
                                                "runId": "unrelated-run"})
    await writer.run("t-r", run_input.run_id, agent="approval", text="Deleted.")
    result = await asyncio.wait_for(cli, 60)
    assert result.code == 0, result.stderr
    lines = result.json_lines()
    assert lines[0]["topic"] == ops_settings.topics.requests
    assert lines[0]["value"]["requestId"] == request.request_id
    assert [line["value"].get("verdict") for line in lines[1:3]] == ["queued", "admitted"]
    assert [line["value"]["type"] for line in lines[3:]] == [
        "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "RUN_FINISHED"]
    assert {line["headers"]["agui-run-id"] for line in lines[3:]} == {run_input.run_id}


async def test_a_gatekeeper_rejection_is_printed_with_its_code(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await interrupted_thread(writer, "t-x")
    cli = asyncio.create_task(run_cli(ops_settings, "resume", "t-x", "--cancel-all"))
    request = await next_request(ops_settings, "t-x")
    assert [e.status for e in request.input.resume or []] == ["cancelled", "cancelled"]
    await writer.decision("t-x", request.request_id, "rejected", code="thread_busy",
                          message="thread t-x is running run-9")
    result = await asyncio.wait_for(cli, 60)
    assert result.code == 1
    assert "DECISION rejected" in result.stdout
    assert "thread_busy: thread t-x is running run-9" in result.stdout


async def test_what_the_gatekeeper_would_refuse_is_refused_locally_and_nothing_sent(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await interrupted_thread(writer, "t-l")
    await interrupted_thread(writer, "t-e", expired=True)
    cases = [
        (("t-l", "--resolve", 'approve-1={"approved": true}'),
         ["uncovered_interrupts", "note-2", "--cancel=note-2"]),
        (("t-l", "--resolve", 'approve-1={"approved": "yes"}', "--cancel", "note-2"),
         ["invalid_payload", "approve-1", "'yes' is not of type 'boolean'"]),
        (("t-l", "--cancel", "approve-1", "--cancel", "ghost", "--cancel", "note-2"),
         ["unknown_interrupt", "ghost"]),
        (("t-e", "--resolve", 'approve-1={"approved": true}', "--cancel-expired",
          "--cancel", "note-2"), ["interrupt_expired", "approve-1", "--cancel-expired"]),
        (("t-unknown", "--cancel-all"), ["no state"]),
    ]
    for args, needles in cases:
        result = await run_cli(ops_settings, "resume", *args)
        assert result.code == 1, (args, result.stderr)
        assert "refused, nothing sent" in result.stderr
        for needle in needles:
            assert needle in result.stderr, (args, needle, result.stderr)
    bad_json = await run_cli(ops_settings, "resume", "t-l", "--resolve", "approve-1=yes")
    assert bad_json.code == 2
    assert "not JSON" in bad_json.stderr
    assert await end_offset_total(ops_settings, ops_settings.topics.requests) == 0

    dry = await run_cli(ops_settings, "resume", "t-e", "--cancel-expired", "--resolve",
                        "note-2=\"fine\"", "--dry-run")
    assert dry.code == 0, dry.stderr
    request = decode(RunRequest, dry.stdout)
    assert [(e.interrupt_id, e.status, e.payload) for e in request.input.resume or []] == [
        ("approve-1", "cancelled", None), ("note-2", "resolved", "fine")]
    assert await end_offset_total(ops_settings, ops_settings.topics.requests) == 0


async def test_no_decision_in_time_says_so(ops_settings: KafkaSettings, writer: Writer) -> None:
    await interrupted_thread(writer, "t-slow")
    result = await run_cli(ops_settings, "resume", "t-slow", "--cancel-all", "--timeout", "1")
    assert result.code == 2
    assert "no decision within 1s" in result.stderr
    assert await end_offset_total(ops_settings, ops_settings.topics.requests) == 1


async def test_resume_can_answer_an_interrupt_whose_id_ends_in_equals(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    """``--resolve ID=JSON`` split at the first ``=``, so an interrupt id holding one (a
    base64 id's padding, ``YWJjZA==``) could never be answered from the terminal."""
    interrupts = [Interrupt(id="YWJjZA==", reason="approval")]
    await writer.run("t-eq", "r1", interrupts=interrupts)
    await writer.interrupted("t-eq", "r1", interrupts)
    tried = await run_cli(ops_settings, "resume", "t-eq", "--resolve",
                          'YWJjZA==={"approved": true}', "--dry-run")
    assert tried.code == 0, tried.stderr
    (request,) = tried.json_lines()
    assert request["input"]["resume"] == [
        {"interruptId": "YWJjZA==", "status": "resolved", "payload": {"approved": True}}]
