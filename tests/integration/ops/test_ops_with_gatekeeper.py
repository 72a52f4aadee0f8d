"""The operator commands against the real gatekeeper process (the test plays the producer)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ag_ui.core import Interrupt, RunAgentInput
from ops_support import Service, Writer, run_cli, services, wait_for_records

from contracts import ControlCommand, Decision, Dispatch, RunRequest, decode, encode
from contracts.codec import to_wire
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}
USER = {"id": "u1", "role": "user", "content": "tidy the disk"}


async def decisions_on(settings: KafkaSettings, thread: str, count: int) -> list[Decision]:
    records = await wait_for_records(settings, settings.topics.decisions, thread, count, 60)
    return [decode(Decision, r.value) for r in records]


async def until_status(settings: KafkaSettings, thread: str, status: str) -> None:
    for _ in range(100):
        listed = await run_cli(settings, "threads", "--json")
        if any(r["threadId"] == thread and r["status"] == status for r in listed.json_lines()):
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"{thread} never became {status}")


async def test_interrupt_resume_and_cancel_through_the_real_gatekeeper(
    ops_settings: KafkaSettings, writer: Writer, tmp_path: Path
) -> None:
    thread = "t-gk"
    gatekeeper = Service("services.gatekeeper", ops_settings, tmp_path)
    async with services(gatekeeper):
        await gatekeeper.wait_for_log("assigned partitions")
        # 1. A consumer starts a run; the gatekeeper admits it; the "producer" interrupts it.
        first = RunRequest(request_id="q-start", agent="scripted", submitted_at=datetime.now(UTC),
                           input=RunAgentInput.model_validate({
                               "threadId": thread, "runId": "run-1", "messages": [USER],
                               "state": {"step": 1}, "tools": [], "context": []}))
        await writer.send(ops_settings.topics.requests, thread, encode(first))
        (admitted,) = await decisions_on(ops_settings, thread, 1)
        assert admitted.verdict == "admitted"
        interrupts = [Interrupt(id="approve", reason="tool_approval", response_schema=SCHEMA,
                                expires_at="2999-01-01T00:00:00Z"),
                      Interrupt(id="late", reason="confirm", expires_at="2020-01-01T00:00:00Z")]
        await writer.run(thread, "run-1", text="May I?", interrupts=interrupts,
                         input_extra=to_wire(first.input))
        await until_status(ops_settings, thread, "interrupted")

        # 2. What the gatekeeper would refuse is refused locally, and it does refuse it too.
        refused = await run_cli(ops_settings, "resume", thread, "--resolve",
                                'approve={"approved": true}', "--resolve", 'late="ok"')
        assert refused.code == 1
        assert "interrupt_expired" in refused.stderr
        dry = await run_cli(ops_settings, "resume", thread, "--resolve",
                            'approve={"approved": true}', "--cancel-expired", "--dry-run")
        partial = decode(RunRequest, dry.stdout)
        partial.input.resume = (partial.input.resume or [])[:1]
        await writer.send(ops_settings.topics.requests, thread, encode(partial))
        rejected = (await decisions_on(ops_settings, thread, 2))[1]
        assert (rejected.verdict, rejected.code) == ("rejected", "uncovered_interrupts")
        assert rejected.interrupt_ids == ["late"]
        shown = await run_cli(ops_settings, "tail", "--thread", thread, "--decisions",
                              "--from-beginning", "--exit")
        assert "uncovered_interrupts" in shown.stdout

        # 3. The full resume is admitted by the real gatekeeper and dispatched complete.
        resumed = await run_cli(ops_settings, "resume", thread, "--resolve",
                                'approve={"approved": true}', "--cancel-expired", "--no-follow",
                                "--json")
        assert resumed.code == 0, resumed.stderr + resumed.stdout
        request_line, decision_line = resumed.json_lines()
        assert decision_line["value"]["verdict"] == "admitted"
        new_run = request_line["value"]["input"]["runId"]
        dispatches = await wait_for_records(ops_settings, ops_settings.topics.dispatch("scripted"),
                                            thread, 2)
        dispatch = decode(Dispatch, dispatches[1].value)
        assert dispatch.input.run_id == new_run
        assert [(e.interrupt_id, e.status) for e in dispatch.input.resume or []] == [
            ("approve", "resolved"), ("late", "cancelled")]
        assert [m.id for m in dispatch.input.messages] == ["u1", "run-1-m"]
        assert dispatch.input.state == {"step": 1}
        await until_status(ops_settings, thread, "running")

        # 4. Cancel finds the current run in the gatekeeper's state; lag sees its group.
        cancelled = await run_cli(ops_settings, "cancel", thread)
        assert cancelled.code == 0, cancelled.stderr
        (control,) = await wait_for_records(ops_settings, ops_settings.topics.control, thread)
        assert decode(ControlCommand, control.value).run_id == new_run
        lag = await run_cli(ops_settings, "lag", "--json")
        groups = {row["group"] for row in lag.json_lines()}
        assert f"{ops_settings.topic_prefix}.gatekeeper" in groups
