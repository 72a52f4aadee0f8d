"""``threads``, ``threads show``, ``cancel``, ``deadletter`` and ``lag`` against the real broker."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime

import pytest
from ag_ui.core import Interrupt
from ops_support import Writer, run_cli, wait_for_records

from contracts import ControlCommand, ThreadState, decode
from services.kafka.clients import TopicPartition, new_consumer, new_producer
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}}


async def test_threads_lists_the_latest_state_of_each_thread_with_filters(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await writer.state(ThreadState(thread_id="t-idle", status="running", agent="scripted",
                                   run_id="r0", updated_at=datetime.now(UTC)))
    await writer.state(ThreadState(thread_id="t-idle", status="idle", agent="scripted",
                                   run_id="r0", updated_at=datetime.now(UTC)))
    await writer.interrupted("t-old", "r1", [
        Interrupt(id="late", reason="x", expires_at="2020-01-01T00:00:00Z"),
        Interrupt(id="fine", reason="x", expires_at="2999-01-01T00:00:00Z")], agent="approval")
    await writer.interrupted("t-new", "r2", [Interrupt(id="ask", reason="x")])
    await writer.state(ThreadState(thread_id="t-gone", status="idle"))
    await writer.send(ops_settings.topics.threads, "t-gone", None)  # tombstone

    listed = await run_cli(ops_settings, "threads", "--json")
    assert listed.code == 0, listed.stderr
    rows = {r["threadId"]: r for r in listed.json_lines()}
    assert set(rows) == {"t-idle", "t-old", "t-new"}
    assert rows["t-idle"]["status"] == "idle"
    assert rows["t-old"]["openInterrupts"] == ["late", "fine"]
    assert rows["t-old"]["expired"] == ["late"]
    assert rows["t-old"]["oldestExpiry"] == "2020-01-01T00:00:00Z"

    interrupted = await run_cli(ops_settings, "threads", "--status", "interrupted", "--json")
    assert {r["threadId"] for r in interrupted.json_lines()} == {"t-old", "t-new"}
    expired = await run_cli(ops_settings, "threads", "--expired", "--json")
    assert [r["threadId"] for r in expired.json_lines()] == ["t-old"]
    by_agent = await run_cli(ops_settings, "threads", "--agent", "approval", "--json")
    assert [r["threadId"] for r in by_agent.json_lines()] == ["t-old"]

    table = await run_cli(ops_settings, "threads", "--status", "interrupted")
    assert table.code == 0, table.stderr
    assert "t-old" in table.stdout
    assert "late, fine" in table.stdout
    assert "1 expired" in table.stdout
    assert "expired" in table.stdout
    assert "t-idle" not in table.stdout
    wrong = await run_cli(ops_settings, "threads", "--status", "sleeping")
    assert wrong.code == 2


async def test_threads_show_prints_runs_decisions_and_open_interrupts(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await writer.run("t-s", "r1", text="hi")
    await writer.decision("t-s", "q1", "admitted", run="r1")
    interrupts = [Interrupt(id="approve", reason="tool_approval", message="OK to delete?",
                            response_schema=SCHEMA, expires_at="2999-01-01T00:00:00Z")]
    await writer.run("t-s", "r2", interrupts=interrupts,
                     input_extra={"resume": []})
    await writer.decision("t-s", "q2", "admitted", run="r2")
    await writer.decision("t-s", "q3", "rejected", code="uncovered_interrupts",
                          message="approve not covered", interrupt_ids=["approve"])
    await writer.interrupted("t-s", "r2", interrupts)
    await writer.run("t-other", "r9")

    shown = await run_cli(ops_settings, "threads", "show", "t-s", "--json")
    assert shown.code == 0, shown.stderr
    (doc,) = shown.json_lines()
    assert [r["runId"] for r in doc["runs"]] == ["r1", "r2"]
    assert [r["outcome"] for r in doc["runs"]] == ["success", "interrupt"]
    assert doc["runs"][1]["interruptIds"] == ["approve"]
    assert [d["requestId"] for d in doc["decisions"]] == ["q1", "q2", "q3"]
    assert doc["openInterrupts"][0]["interrupt"]["responseSchema"] == SCHEMA
    assert doc["state"]["status"] == "interrupted"

    pretty = await run_cli(ops_settings, "threads", "show", "t-s")
    assert pretty.code == 0, pretty.stderr
    for needle in ("interrupted", "r1", "r2", "uncovered_interrupts", "approve",
                   "OK to delete?", "responseSchema", '"approved"', "expires in"):
        assert needle in pretty.stdout, needle
    assert "r9" not in pretty.stdout
    unknown = await run_cli(ops_settings, "threads", "show", "t-nobody")
    assert unknown.code == 1
    assert "unknown thread" in unknown.stderr


BOX = set("─━│┃┏┓┗┛┌┐└┘├┤┬┴┼┡┩╇╈╍")


async def test_threads_print_ids_whole_in_plain_columns_when_piped_to_a_narrow_width(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    long_thread = "imm-448-" + "t" * 112
    long_run = "run-448-" + "r" * 72
    assert len(long_thread) == 120
    await writer.run(long_thread, long_run, interrupts=[Interrupt(id="approve-448", reason="x")])
    await writer.decision(long_thread, "req-448-" + "q" * 60, "admitted", run=long_run)
    await writer.interrupted(long_thread, long_run, [Interrupt(id="approve-448", reason="x")])
    await writer.state(ThreadState(thread_id="t-short", status="idle", agent="scripted",
                                   run_id="r-short", updated_at=datetime.now(UTC)))

    listed = await run_cli(ops_settings, "threads", COLUMNS="80")
    assert listed.code == 0, listed.stderr
    assert long_thread in listed.stdout
    assert long_run in listed.stdout
    assert not BOX & set(listed.stdout)
    assert "…" not in listed.stdout
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["THREAD", "STATUS", "AGENT", "RUN", "OPEN", "INTERRUPTS",
                              "OLDEST", "EXPIRY", "LAST", "ACTIVITY"]
    by_thread = {row.split()[0]: row for row in rows}
    assert set(by_thread) == {long_thread, "t-short"}
    for column in ("STATUS", "RUN"):  # aligned: each column starts where its header does
        at = header.index(column)
        assert {row[at - 1] for row in rows} == {" "}
        assert all(row[at] != " " for row in rows)
    assert "2 of 2 threads" in listed.stderr

    shown = await run_cli(ops_settings, "threads", "show", long_thread, COLUMNS="80")
    assert shown.code == 0, shown.stderr
    assert not BOX & set(shown.stdout)
    lines = shown.stdout.splitlines()
    assert long_thread in lines[0]
    assert any(line.startswith(long_run) for line in lines)  # the runs table's row
    assert any("req-448-" + "q" * 60 in line and long_run in line for line in lines)
    assert "…" not in shown.stdout


async def test_cancel_sends_a_control_command_for_the_current_run(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await writer.state(ThreadState(thread_id="t-c", status="running", agent="scripted",
                                   run_id="run-live", updated_at=datetime.now(UTC)))
    cli = asyncio.create_task(run_cli(ops_settings, "cancel", "t-c", "--follow", "--json"))
    (record,) = await wait_for_records(ops_settings, ops_settings.topics.control, "t-c")
    command = decode(ControlCommand, record.value)
    assert (command.thread_id, command.run_id, command.kind) == ("t-c", "run-live", "cancel")
    assert command.requested_by.startswith("agui-relay:")
    await writer.event("t-c", "run-live", {"type": "RUN_FINISHED", "threadId": "t-c",
                                           "runId": "run-live", "outcome": {"type": "cancelled"}})
    result = await asyncio.wait_for(cli, 60)
    assert result.code == 0, result.stderr
    control, finished = result.json_lines()
    assert control["value"]["runId"] == "run-live"
    assert finished["value"]["outcome"] == {"type": "cancelled"}

    named = await run_cli(ops_settings, "cancel", "t-c", "run-other")
    assert named.code == 0, named.stderr
    assert "cancel sent for run run-other" in named.stdout

    await writer.interrupted("t-i", "r1", [Interrupt(id="i", reason="x")])
    refused = await run_cli(ops_settings, "cancel", "t-i")
    assert refused.code == 1
    assert "is interrupted" in refused.stderr
    assert "--cancel-all" in refused.stderr
    unknown = await run_cli(ops_settings, "cancel", "t-nobody")
    assert unknown.code == 1
    records = await wait_for_records(ops_settings, ops_settings.topics.control, "t-c", 2)
    assert len(records) == 2


async def test_deadletter_lists_and_shows_the_original_record(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    await writer.deadletter("t-1", '{"requestId": "r", "input": 3}', "input is not an object",
                            "schema_invalid")
    await asyncio.sleep(0.01)  # listed in time order: two records of one ms on two partitions
    partition, offset = await writer.deadletter(None, base64.b64encode(b"\xff\x00raw").decode(),
                                                "not UTF-8", "invalid_json")
    listed = await run_cli(ops_settings, "deadletter", "--json")
    assert listed.code == 0, listed.stderr
    first, second = listed.json_lines()
    assert first["value"]["code"] == "schema_invalid"
    assert first["original"] == {"requestId": "r", "input": 3}
    assert second["original"] == base64.b64encode(b"\xff\x00raw").decode()

    table = await run_cli(ops_settings, "deadletter")
    assert "2 dead letters" in table.stdout
    assert "schema_invalid" in table.stdout
    assert "input is not an object" in table.stdout

    shown = await run_cli(ops_settings, "deadletter", "show", "1")
    assert shown.code == 0, shown.stderr
    for needle in ("schema_invalid", "input is not an object", "gatekeeper",
                   ops_settings.topics.requests, '"requestId"', "x-test=1"):
        assert needle in shown.stdout, needle
    by_offset = await run_cli(ops_settings, "deadletter", "show", f"{partition}:{offset}",
                              "--json")
    assert by_offset.json_lines()[0]["value"]["reason"] == "not UTF-8"
    missing = await run_cli(ops_settings, "deadletter", "show", "7")
    assert missing.code == 2


async def test_lag_sets_committed_against_end_offsets(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    topic = ops_settings.topics.requests
    placed = [await writer.send(topic, f"thread-{i}", b"{}") for i in range(12)]
    group = f"{ops_settings.topic_prefix}.gatekeeper"
    consumer = new_consumer(ops_settings, "ops-test-lag", group_id=group)
    await consumer.start()
    try:
        partition = placed[0][0]
        in_partition = sum(1 for p, _ in placed if p == partition)
        consumer.assign([TopicPartition(topic, partition)])
        await consumer.commit({TopicPartition(topic, partition): 1})
    finally:
        await consumer.stop()
    result = await run_cli(ops_settings, "lag", "--json")
    assert result.code == 0, result.stderr
    rows = {r["partition"]: r for r in result.json_lines() if r["group"] == group}
    assert rows.pop(partition) == {"group": group, "topic": topic, "partition": partition,
                                   "committed": 1, "end": in_partition,
                                   "lag": in_partition - 1, "held": 0}
    # the group reads requests: its partitions with records and no committed offset count
    # from their start
    assert {p: (r["committed"], r["lag"]) for p, r in rows.items()} == {
        p: (None, sum(1 for q, _ in placed if q == p)) for p, _ in placed if p != partition}
    table = await run_cli(ops_settings, "lag", "--group", group)
    assert group in table.stdout
    assert "total" in table.stdout
    none = await run_cli(ops_settings, "lag", "--group", "no-such-group")
    assert "no consumer group" in none.stdout


async def test_lag_shows_what_an_open_transaction_holds_back(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    topic = ops_settings.topics.requests
    partition, offset = await writer.send(topic, "thread-held", b"{}")
    tp = TopicPartition(topic, partition)
    group = f"{ops_settings.topic_prefix}.held"
    consumer = new_consumer(ops_settings, "ops-test-held", group_id=group)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: offset + 1})
    finally:
        await consumer.stop()
    producer = new_producer(ops_settings, "ops-test-held", transactional_id=f"{group}.tx")
    await producer.start()
    try:
        await producer.begin_transaction()
        await (await producer.send(topic, b"{}", key=b"thread-held", partition=partition))
        result = await run_cli(ops_settings, "lag", "--json", "--group", group)
        assert result.code == 0, result.stderr
        assert result.json_lines() == [{
            "group": group, "topic": topic, "partition": partition, "committed": offset + 1,
            "end": offset + 1, "lag": 0, "held": 1}]
        table = await run_cli(ops_settings, "lag", "--group", group)
        assert "held" in table.stdout
        await producer.abort_transaction()
        ended = await run_cli(ops_settings, "lag", "--json", "--group", group)
        assert [r["held"] for r in ended.json_lines()] == [0]
    finally:
        await producer.stop()


async def test_lag_counts_no_transaction_marker_as_lag(
    ops_settings: KafkaSettings, writer: Writer
) -> None:
    """Every service writes in transactions: a group that has read everything commits the
    offset of the commit marker after its last record, one short of the end, and ``lag``
    showed 1 for ever on every partition a transaction wrote (found by probing)."""
    topic = ops_settings.topics.requests
    producer = new_producer(ops_settings, "ops-test-markers",
                            transactional_id=f"{ops_settings.topic_prefix}.markers.tx")
    await producer.start()
    try:
        await producer.begin_transaction()
        sent = [await (await producer.send(topic, b"{}", key=b"thread-m", partition=0))
                for _ in range(2)]
        await producer.commit_transaction()
    finally:
        await producer.stop()
    tp = TopicPartition(topic, 0)
    last = sent[-1].offset
    for group, committed in ((f"{ops_settings.topic_prefix}.all-read", last + 1),
                             (f"{ops_settings.topic_prefix}.one-left", last)):
        consumer = new_consumer(ops_settings, "ops-test-markers", group_id=group)
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.commit({tp: committed})
        finally:
            await consumer.stop()
    result = await run_cli(ops_settings, "lag", "--json")
    assert result.code == 0, result.stderr
    lags = {r["group"]: (r["committed"], r["end"], r["lag"]) for r in result.json_lines()
            if r["topic"] == topic and r["partition"] == 0}
    assert lags[f"{ops_settings.topic_prefix}.all-read"] == (last + 1, last + 2, 0)
    assert lags[f"{ops_settings.topic_prefix}.one-left"] == (last, last + 2, 1)


async def test_lag_prints_a_hostile_group_id_as_written_never_as_terminal_codes_or_markup(
        ops_settings: KafkaSettings) -> None:
    """Any client may commit offsets on the deployment's topics under a group id of its
    choosing; ``lag`` printed it raw: an OSC 8 hyperlink, colours and a bidi override
    reached the operator's terminal, and ``[red]`` was read as markup (found by probing)."""
    group = (f"{ops_settings.topic_prefix}.gatekeeper"
             "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\x1b[31m[red]r[/red]\u202e")
    consumer = new_consumer(ops_settings, "hostile-group", group_id=group)
    await consumer.start()
    try:
        tp = TopicPartition(ops_settings.topics.requests, 0)
        consumer.assign([tp])
        await consumer.commit({tp: 0})
    finally:
        await consumer.stop()
    result = await run_cli(ops_settings, "lag", COLUMNS="400")
    assert result.code == 0, result.stderr[-1000:]
    assert "click" in result.stdout
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in result.stdout, repr(result.stdout[-800:])
    assert "[red]r[/red]" in result.stdout, "markup in a group id was read as markup"
