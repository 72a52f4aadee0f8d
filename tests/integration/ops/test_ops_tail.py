"""``agui-relay tail`` against the real broker, run as a subprocess."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from ag_ui.core import Interrupt
from ops_support import PARTITIONS, Writer, cli_process, read_line, run_cli

from contracts.headers import RUN_ID
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_thread_partition_is_where_the_broker_put_the_records(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    threads = [f"thread-{i}-{'x' * i}" for i in range(24)]
    placed: dict[str, set[int]] = {}
    for thread in threads:
        partition, _ = await writer.event(thread, f"{thread}-run", {
            "type": "RUN_STARTED", "threadId": thread, "runId": f"{thread}-run"})
        placed.setdefault(thread, set()).add(partition)
        assert partition == partition_for(thread, PARTITIONS)
    assert len({p for ps in placed.values() for p in ps}) > 1  # the keys really spread

    target = threads[7]
    result = await run_cli(ops_settings, "tail", "--thread", target, "--from-beginning",
                           "--exit", "--json")
    assert result.code == 0, result.stderr
    (record,) = result.json_lines()
    assert record["key"] == target
    assert record["partition"] == next(iter(placed[target]))
    assert record["topic"] == ops_settings.topics.events
    assert record["headers"]["agui-event-type"] == "RUN_STARTED"
    assert record["value"] == {"type": "RUN_STARTED", "threadId": target,
                               "runId": f"{target}-run"}


async def test_filters_and_interleaving_with_json_parsed_back(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await writer.run("t-a", "run-a1", agent="approval", text="hello")
    await writer.run("t-b", "run-b1", agent="scripted",
                     interrupts=[Interrupt(id="i1", reason="choice")])
    await writer.decision("t-a", "req-a1", "admitted", run="run-a1", agent="approval")
    await writer.decision("t-b", "req-b2", "rejected", code="uncovered_interrupts",
                          message="i1 not covered", interrupt_ids=["i1"])
    await writer.deadletter("t-b", "{broken", "not JSON", "invalid_json")
    # A resent event (same run and sequence number) is shown once.
    await writer.event("t-a", "run-a1", {"type": "RUN_FINISHED", "threadId": "t-a",
                                         "runId": "run-a1"}, agent="approval", seq=4)

    everything = await run_cli(ops_settings, "tail", "--from-beginning", "--exit", "--json",
                               "--decisions", "--deadletter")
    assert everything.code == 0, everything.stderr
    records = everything.json_lines()
    by_topic = {r["topic"] for r in records}
    assert by_topic == {ops_settings.topics.events, ops_settings.topics.decisions,
                        ops_settings.topics.deadletter}
    assert len(records) == 5 + 2 + 2 + 1  # the resent RUN_FINISHED is dropped
    assert [r["timestamp"] for r in records] == sorted(r["timestamp"] for r in records)

    runs = await run_cli(ops_settings, "tail", "--from-beginning", "--exit", "--json",
                         "--run", "run-a1", "--type", "run_started,run_finished")
    assert [r["value"]["type"] for r in runs.json_lines()] == ["RUN_STARTED", "RUN_FINISHED"]

    agent = await run_cli(ops_settings, "tail", "--from-beginning", "--exit", "--json",
                          "--agent", "scripted", "--decisions")
    kinds = [(r["topic"].rsplit(".", 1)[1], r["key"]) for r in agent.json_lines()]
    assert kinds == [("events", "t-b"), ("events", "t-b"), ("decisions", "t-b")]

    thread_b = await run_cli(ops_settings, "tail", "--thread", "t-b", "--from-beginning",
                             "--exit", "--json", "--decisions", "--deadletter")
    assert {r["key"] for r in thread_b.json_lines()} == {"t-b"}
    assert len(thread_b.json_lines()) == 4


async def test_since_starts_at_a_timestamp(ops_settings: KafkaSettings, writer: Writer) -> None:
    now_ms = int(time.time() * 1000)
    old, recent = now_ms - 3_600_000, now_ms - 60_000
    await writer.event("t", "old-run", {"type": "RUN_STARTED", "threadId": "t",
                                        "runId": "old-run"}, timestamp_ms=old)
    await writer.event("t", "new-run", {"type": "RUN_STARTED", "threadId": "t",
                                        "runId": "new-run"}, timestamp_ms=recent)
    by_duration = await run_cli(ops_settings, "tail", "--since", "10m", "--exit", "--json")
    assert [r["value"]["runId"] for r in by_duration.json_lines()] == ["new-run"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((old + 1000) / 1000))
    by_iso = await run_cli(ops_settings, "tail", "--since", iso, "--exit", "--json")
    assert [r["value"]["runId"] for r in by_iso.json_lines()] == ["new-run"]
    everything = await run_cli(ops_settings, "tail", "--since", "2h", "--exit", "--json")
    assert len(everything.json_lines()) == 2
    future = await run_cli(ops_settings, "tail", "--since", "2999-01-01", "--exit", "--json")
    assert future.code == 0
    assert future.json_lines() == []
    bad = await run_cli(ops_settings, "tail", "--since", "last week", "--exit")
    assert bad.code == 2
    assert "--since" in bad.stderr
    one = await run_cli(ops_settings, "tail", "--thread", "t", "--since", "10m", "--exit",
                        "--json")
    assert [r["value"]["runId"] for r in one.json_lines()] == ["new-run"]


async def test_one_thread_shows_its_history_by_default_then_stops_with_exit(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    partition = partition_for("t-h", PARTITIONS)
    neighbour = next(f"t-h-{i}" for i in range(1000)
                     if partition_for(f"t-h-{i}", PARTITIONS) == partition)
    await writer.run("t-h", "run-h1", text="first")
    await writer.run(neighbour, "run-n1")  # same partition, another thread
    await writer.run("t-h", "run-h2")
    await writer.decision("t-h", "req-h2", "admitted", run="run-h2")

    history = await run_cli(ops_settings, "tail", "--thread", "t-h", "--exit", "--json")
    assert history.code == 0, history.stderr
    records = history.json_lines()
    assert {r["key"] for r in records} == {"t-h"}
    assert [(r["headers"][RUN_ID], r["value"]["type"]) for r in records] == [
        ("run-h1", "RUN_STARTED"), ("run-h1", "TEXT_MESSAGE_START"),
        ("run-h1", "TEXT_MESSAGE_CONTENT"), ("run-h1", "TEXT_MESSAGE_END"),
        ("run-h1", "RUN_FINISHED"), ("run-h2", "RUN_STARTED"), ("run-h2", "RUN_FINISHED")]
    assert "from the beginning" in history.stderr

    with_decisions = await run_cli(ops_settings, "tail", "--thread", "t-h", "--exit",
                                   "--decisions")
    assert with_decisions.code == 0, with_decisions.stderr
    assert "run-h1" in with_decisions.stdout
    assert "DECISION admitted" in with_decisions.stdout
    assert "run-n1" not in with_decisions.stdout

    everything = await run_cli(ops_settings, "tail", "--exit", "--json")
    assert everything.code == 0, everything.stderr
    assert everything.json_lines() == []  # without --thread: from now, as before


async def test_pretty_lines_expand_interrupts_and_show_rejection_codes(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await writer.run("t-p", "run-p1", interrupts=[
        Interrupt(id="approve-1", reason="tool_approval", message="Delete 3 files?",
                  expires_at="2020-01-01T00:00:00Z"),
        Interrupt(id="pick-2", reason="choice", expires_at="2999-01-01T00:00:00Z")])
    await writer.decision("t-p", "req-9", "rejected", code="interrupt_expired",
                          message="approve-1 expired", interrupt_ids=["approve-1"])
    result = await run_cli(ops_settings, "tail", "--from-beginning", "--exit", "--decisions")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    finished = next(i for i, line in enumerate(lines) if "RUN_FINISHED" in line)
    assert "t-p" in lines[finished]
    assert "run-p1" in lines[finished]
    assert "interrupt (2)" in lines[finished]
    assert "approve-1" in lines[finished + 1]
    assert "Delete 3 files?" in lines[finished + 1]
    assert "expired" in lines[finished + 1]
    assert "ago" in lines[finished + 1]
    assert "pick-2" in lines[finished + 2]
    assert "expires in" in lines[finished + 2]
    assert any("DECISION rejected" in line and "interrupt_expired" in line for line in lines)


async def test_follows_live_and_stops_cleanly_on_ctrl_c(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await writer.event("t-live", "before", {"type": "RUN_STARTED", "threadId": "t-live",
                                            "runId": "before"})
    async with cli_process(ops_settings, "tail", "--thread", "t-live", "--json") as process:
        banner = await read_line(process.stderr)
        assert "tail" in banner
        history = await read_line(process.stdout)  # the thread's past comes first
        assert '"runId":"before"' in history
        await writer.event("t-live", "after", {"type": "RUN_STARTED", "threadId": "t-live",
                                               "runId": "after"})
        await writer.event("t-other", "x", {"type": "RUN_STARTED", "threadId": "t-other",
                                            "runId": "x"})
        await writer.event("t-live", "after", {"type": "RUN_FINISHED", "threadId": "t-live",
                                               "runId": "after"})
        first = await read_line(process.stdout)
        second = await read_line(process.stdout)
        assert '"runId":"after"' in first
        assert "RUN_STARTED" in first
        assert "RUN_FINISHED" in second
        process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(process.wait(), 15)
        assert code == 0
        assert process.stdout is not None
        assert await process.stdout.read() == b""
