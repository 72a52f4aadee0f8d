"""Run ids are the client's (``RunAgentInput.runId``) and unique per thread only: the
gatekeeper admits ``run-1`` on every thread. The operator commands tell runs apart by
(thread, run id): keyed by the run id alone, ``tail`` dropped a second thread's ``run-1``
as copies of the first's (found by probing).
"""

from __future__ import annotations

import pytest
from ops_support import Writer, run_cli

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_tail_shows_every_thread_whose_run_id_another_thread_used_too(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    for thread in ("alpha", "beta", "gamma"):
        writer.seq.pop("run-1", None)  # each thread's run numbers its events from 0
        await writer.run(thread, "run-1", text=f"hello from {thread}")
    shown = await run_cli(ops_settings, "tail", "--from-beginning", "--exit", "--json")
    assert shown.code == 0, shown.stderr
    events = shown.json_lines()
    threads = sorted({line["key"] for line in events})
    assert threads == ["alpha", "beta", "gamma"], f"tail showed only {threads}"
    assert len(events) == 3 * len([e for e in events if e["key"] == "alpha"])
