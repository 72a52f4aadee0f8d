"""``threads show`` never prints a state from before a run end it has read.

The state is read before the events, so a run that ended in between reads
``running`` next to its own end. With the real gatekeeper: 40 runs back to
back, ``threads show`` (in this process, the moment the run's last event is
written) shows each closed. Without a gatekeeper to write the closing state
at all: the command shows the state the end produces (derived with the
gatekeeper's rules), not ``running``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt, RunAgentInput
from ops_support import Service, Writer, run_cli, services, wait_for_records

from contracts import RunRequest, ThreadState, encode
from services.cli.ops import threads
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

RUNS = 40
ASK = Interrupt(id="ask", reason="confirm")


def _request(thread: str, run: str) -> RunRequest:
    return RunRequest(request_id=f"q-{run}", agent="scripted", submitted_at=datetime.now(UTC),
                      input=RunAgentInput.model_validate({
                          "threadId": thread, "runId": run, "state": {}, "tools": [],
                          "context": [], "forwardedProps": {},
                          "messages": [{"id": "u1", "role": "user", "content": "hi"}]}))


async def _shown(settings: KafkaSettings, thread: str,
                 capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert await threads._show(settings, thread, True) == 0
    shown: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return shown


async def test_threads_show_right_after_each_run_shows_it_closed(
        ops_settings: KafkaSettings, writer: Writer, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    thread = f"t-rw-{uuid.uuid4().hex[:6]}"
    behind = []
    gatekeeper = Service("services.gatekeeper", ops_settings, tmp_path)
    async with services(gatekeeper):
        await gatekeeper.wait_for_log("assigned partitions")
        for i in range(RUNS):
            run = f"run-{i}"
            await writer.send(ops_settings.topics.requests, thread, encode(_request(thread, run)))
            await wait_for_records(ops_settings, ops_settings.topics.decisions, thread, i + 1)
            await writer.run(thread, run, text="done")
            state = (await _shown(ops_settings, thread, capsys))["state"]
            if state["runId"] != run or state["status"] != "idle":
                behind.append((run, state["status"], state["runId"]))
    assert not behind, f"{len(behind)} of {RUNS} shows were behind the run's end: {behind[:3]}"


async def test_with_no_gatekeeper_writing_it_the_state_the_end_produces_is_shown(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    thread = f"t-rw-{uuid.uuid4().hex[:6]}"
    await writer.state(ThreadState(thread_id=thread, status="running", agent="scripted",
                                   run_id="run-1", recent_run_ids=["run-1"],
                                   updated_at=datetime.now(UTC)))
    await writer.run(thread, "run-1", text="May I?", interrupts=[ASK])
    shown = await run_cli(ops_settings, "threads", "show", thread, "--json")
    assert shown.code == 0, shown.stderr
    state = orjson.loads(shown.stdout)["state"]
    assert (state["status"], state["runId"], state["interruptedRunId"]) == (
        "interrupted", "run-1", "run-1")
    assert [o["interrupt"]["id"] for o in state["openInterrupts"]] == ["ask"]
