"""``agui-relay audit THREAD`` on the real broker: the trail as a table and as --json.

The writer plays gatekeeper and producer: a run raising an approval, and the
resuming run that resolved it (its input naming who answered), then the
CLI reads the thread back from the topics. An id nothing was written about
is refused with exit 1.
"""

from __future__ import annotations

import uuid

import orjson
import pytest
from ag_ui.core import Interrupt
from ops_support import Writer, run_cli

from services.agui.audit import digest
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_audit_prints_the_interrupt_raised_then_resolved(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    thread = f"audit-{uuid.uuid4().hex[:8]}"
    asked = Interrupt(id="approve-" + "x" * 48, reason="tool_approval", message="Delete?")
    await writer.run(thread, "run-1", agent="approval", interrupts=[asked])
    await writer.run(thread, "run-2", agent="approval", input_extra={"resume": [
        {"interruptId": asked.id, "status": "resolved", "payload": {"approved": True},
         "metadata": {"agui-relay.principal": "tenant-a"}}]})

    shown = await run_cli(ops_settings, "audit", thread, "--json")
    assert shown.code == 0, shown.stderr
    [entry] = orjson.loads(shown.stdout)["interrupts"]
    assert (entry["interruptId"], entry["status"], entry["runId"], entry["agent"]) == (
        asked.id, "resolved", "run-1", "approval")
    assert (entry["answer"]["by"], entry["answer"]["runId"], entry["answer"]["digest"]) == (
        "tenant-a", "run-2", digest({"approved": True}))

    table = await run_cli(ops_settings, "audit", thread, COLUMNS="80")
    assert table.code == 0, table.stderr
    for whole in (asked.id, digest({"approved": True}), "tenant-a", "resolved"):
        assert whole in table.stdout

    unknown = await run_cli(ops_settings, "audit", f"nobody-{uuid.uuid4().hex[:8]}")
    assert unknown.code == 1
    assert "unknown thread" in unknown.stderr
