"""Run ids are the client's (``RunAgentInput.runId``) and unique per thread only: the
gatekeeper admits ``run-1`` on every thread. The operator commands tell runs apart by
(thread, run id): keyed by the run id alone, ``tail`` dropped a second thread's ``run-1``
as copies of the first's, and ``cancel --follow`` took another thread's ``run-1`` ending
for the cancelled run's end (found by probing).
"""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime

import pytest
from ops_support import PARTITIONS, Writer, cli_process, read_line, run_cli

from contracts import ThreadState
from services.kafka.partitioning import partition_for
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


async def running(writer: Writer, thread: str, run: str) -> None:
    await writer.state(ThreadState(thread_id=thread, status="running", agent="scripted",
                                   run_id=run, updated_at=datetime.now(UTC)))


async def test_cancel_follow_waits_for_its_own_threads_run_not_a_namesake(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    """A run of the same id on another thread of the same partition ends meanwhile: it is
    not the cancelled run, which still runs when the timeout comes."""
    target = "thread-a"
    other = next(f"thread-b{i}" for i in range(1000)
                 if partition_for(f"thread-b{i}", PARTITIONS) == partition_for(target,
                                                                               PARTITIONS))
    await running(writer, target, "run-1")
    async with cli_process(ops_settings, "cancel", target, "run-1", "--follow",
                           "--timeout", "4") as process:
        assert "cancel sent" in await read_line(process.stdout)
        writer.seq.pop("run-1", None)
        await writer.run(other, "run-1")
        out, err = await asyncio.wait_for(process.communicate(), 30)
    assert other not in out.decode(), f"cancel --follow showed {other}'s run as its own"
    assert process.returncode == 2, (process.returncode, err.decode())
    assert "did not close within 4s" in err.decode()


async def test_cancel_follow_stopped_by_ctrl_c_says_so_and_exits_130(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    """As ``threads show`` and ``audit`` do; it had exited 2 without a word."""
    await running(writer, "t-stopped", "run-9")
    async with cli_process(ops_settings, "cancel", "t-stopped", "run-9", "--follow",
                           "--timeout", "60") as process:
        assert "cancel sent" in await read_line(process.stdout)
        process.send_signal(signal.SIGINT)
        _out, err = await asyncio.wait_for(process.communicate(), 15)
    assert process.returncode == 130, (process.returncode, err.decode())
    assert "stopped" in err.decode()
    assert "cancel was sent" in err.decode()
