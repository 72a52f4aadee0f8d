"""What the operator commands show of data clients and agents wrote, against a real broker.

Each test plays the services' part by writing their records (``Writer``) and
runs the CLI as a subprocess (``run_cli``), as the neighbouring ops tests do:
the responseSchema an agent sent and a dead letter's original record are
printed without raw bidi or C1 controls, and ``stuck`` prints the ids and the
command an operator copies whole at a pipe's 80 columns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest
from ag_ui.core import Interrupt
from ops_support import Writer, run_cli

from contracts import OpenInterrupt, ThreadState
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

RAW = ("\u202e", "\u009b", "\u0085")
"""A bidi override and two C1 controls (CSI, NEL): every operator command shows them as
escapes (``\\u202e``, ``\\u009b``)."""


async def assert_shown_as_escapes(settings: KafkaSettings, command: tuple[str, ...],
                                  heading: str, escaped: str) -> None:
    """``command`` prints ``heading`` and ``escaped`` (as escapes), no raw ``RAW``."""
    shown = await run_cli(settings, *command)
    assert shown.code == 0, shown.stderr
    assert heading in shown.stdout
    assert escaped in shown.stdout, shown.stdout
    leaked = [hex(ord(c)) for c in RAW if c in shown.stdout]
    assert not leaked, f"raw control characters printed: {leaked}"


async def test_threads_show_prints_a_response_schema_without_raw_controls(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    """The responseSchema is the agent's (an upstream AG-UI service's): rich's JSON
    (``ensure_ascii=False``) passed U+202E and the C1 controls through as they were."""
    schema = {"type": "object", "title": "ok\u202egpj.exe\u0085",
              "properties": {"approved": {"type": "boolean", "description": "\u009b2J"}}}
    interrupts = [Interrupt(id="approve", reason="tool_approval", response_schema=schema)]
    await writer.run("t-schema", "r1", interrupts=interrupts)
    await writer.interrupted("t-schema", "r1", interrupts)
    await assert_shown_as_escapes(ops_settings, ("threads", "show", "t-schema"),
                                  "responseSchema", "ok\\u202egpj.exe\\u0085")


async def test_deadletter_show_prints_the_original_record_without_raw_controls(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    """A record anyone wrote onto a topic and a service refused, printed pretty as JSON."""
    original = orjson.dumps({"threadId": "a\u202eb", "note": "\u009b2J\u0085"}).decode()
    await writer.deadletter("k", original, "refused", "invalid_event")
    await assert_shown_as_escapes(ops_settings, ("deadletter", "show", "1"),
                                  "original record", "a\\u202eb")


PARENT = "3f2b8c1e-4d5a-4b6c-9e7f-0a1b2c3d4e5f"
CHILD = f"{PARENT}/review-9c8b7a6f5e4d3c2b"
RUNNING = "8a7b6c5d-1e2f-4a3b-8c9d-0e1f2a3b4c5d"


@pytest.mark.parametrize("columns", ["80", "200"])
async def test_stuck_prints_ids_and_the_orphans_cancel_command_whole(
        ops_settings: KafkaSettings, writer: Writer, columns: str) -> None:
    """``stuck`` lists the threads to act on and each orphan with the command that cancels
    it; its rich tables cut ids with an ellipsis (a pipe is 80 columns; a UUID thread's
    child id is 58 characters), so the id to copy and the printed command were wrong."""
    now = datetime.now(UTC)
    await writer.state(ThreadState(thread_id=PARENT, status="idle", agent="pipeline_parent",
                                   run_id="run-7d1e2f3a4b5c6d7e", updated_at=now))
    await writer.state(ThreadState(
        thread_id=CHILD, status="interrupted", agent="pipeline_child",
        run_id="run-0a9b8c7d6e5f4a3b", interrupted_run_id="run-0a9b8c7d6e5f4a3b",
        parent_run_id="run-7d1e2f3a4b5c6d7e", updated_at=now,
        open_interrupts=[OpenInterrupt(run_id="run-0a9b8c7d6e5f4a3b", interrupt=Interrupt(
            id="approve:call-763ee3076216f6f2", reason="tool_approval"))]))
    await writer.state(ThreadState(thread_id=RUNNING, status="running", agent="scripted",
                                   run_id="run-5e4d3c2b1a0f9e8d", updated_at=now,
                                   run_started_at=now - timedelta(hours=2)))
    shown = await run_cli(ops_settings, "stuck", COLUMNS=columns)
    assert shown.code == 0, shown.stderr
    flat = " ".join(shown.stdout.replace("│", " ").split())
    for whole in (RUNNING, "run-5e4d3c2b1a0f9e8d", CHILD, "approve:call-763ee3076216f6f2",
                  f"agui-relay resume --cancel-all -- {CHILD}"):
        assert whole in flat, f"{whole!r} cut in stuck's output:\n{shown.stdout}"
