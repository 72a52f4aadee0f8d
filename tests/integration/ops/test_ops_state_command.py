"""``agui-relay state`` and the changelog restore it reports on, against the real broker.

Stores are brought up to ``threads`` by ``services.state.changelog.catch_up``
(the gatekeeper's own restore): a first catch-up reads every record, a
second only those written since, none when nothing was; ``state`` then
sets each store's offset against the changelog's end, with a store held
open by its owner and one whose files are garbage.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt
from ops_support import Writer, run_cli

from contracts import ThreadState, encode
from services.cli.ops.stuck import _stuck
from services.cli.ops.threads import _list
from services.consumer.threadstore import STORE_NAME as CONSUMER_THREADS
from services.gatekeeper.threadstore import STORE_NAME, changes
from services.kafka.clients import new_producer
from services.kafka.reader import TopicReader
from services.producer import checkpoint as cp
from services.producer.checkpoint_disk import STORE_NAME as CHECKPOINTS
from services.producer.checkpoint_disk import changes as checkpoint_changes
from services.runtime.settings import KafkaSettings
from services.state.changelog import catch_up
from services.state.dirs import StateDir

pytestmark = pytest.mark.integration


async def restore(settings: KafkaSettings, states: StateDir, partitions: list[int]
                  ) -> dict[int, tuple[int, bool]]:
    """(records read, full?) per partition, the stores closed after."""
    opened = {p: states.open(p) for p in partitions}
    try:
        done = await catch_up(settings, settings.topics.threads, opened, changes, "test-restore")
    finally:
        for store, _ in opened.values():
            store.close()
    return {p: (r.records, r.plan.full) for p, r in done.items()}


async def test_stores_catch_up_by_their_delta_and_state_shows_them_against_the_end(
    ops_settings: KafkaSettings, writer: Writer, tmp_path: Path
) -> None:
    placed = [await writer.state(ThreadState(thread_id=f"t{i}", status="idle"))
              for i in range(20)]
    partitions = sorted({p for p, _ in placed})
    states = StateDir(tmp_path / STORE_NAME, ops_settings.topics.threads, grace_s=600)
    first = await restore(ops_settings, states, partitions)
    assert first == {p: (sum(1 for q, _ in placed if q == p), True) for p in partitions}

    more = [await writer.state(ThreadState(thread_id=f"t{i}", status="running"))
            for i in range(3)]
    second = await restore(ops_settings, states, partitions)
    assert {p: n for p, (n, _) in second.items()} == {
        p: sum(1 for q, _ in more if q == p) for p in partitions}
    assert not any(full for _, full in second.values())
    third = await restore(ops_settings, states, partitions)
    assert all(n == 0 for n, _ in third.values())

    late_partition, _ = await writer.state(ThreadState(thread_id="t0", status="idle"))
    held, _ = states.open(partitions[0])  # an owner holding it open meanwhile
    try:
        result = await run_cli(ops_settings, "state", "--json", "--dir", str(tmp_path))
    finally:
        held.close()
    assert result.code == 0, result.stderr
    rows = {r["partition"]: r for r in result.json_lines()}
    assert sorted(rows) == partitions
    for p, row in rows.items():
        assert row["store"] == STORE_NAME
        assert row["behind"] == (1 if p == late_partition else 0)
        assert row["offset"] + row["behind"] == row["end"]
        assert row["bytes"] > 0
        assert row["open"] == (p == partitions[0])

    for child in states.path(partitions[-1]).iterdir():
        child.write_bytes(b"garbage")
    table = await run_cli(ops_settings, "state", "--dir", str(tmp_path))
    assert table.code == 0, table.stderr
    assert "does not open" in table.stdout
    empty = await run_cli(ops_settings, "state", "--dir", str(tmp_path / "none"))
    assert "no state stores" in empty.stdout


async def test_a_store_caught_up_to_a_transactions_end_is_not_shown_behind(
    ops_settings: KafkaSettings, tmp_path: Path
) -> None:
    """The gatekeeper writes thread states in transactions: a store that has every record
    stops at the offset of the commit marker that follows the last, one short of the end,
    and ``state`` showed it ``behind 1`` in yellow for ever (found by probing)."""
    producer = new_producer(ops_settings, "ops-test-state-markers",
                            transactional_id=f"{ops_settings.topic_prefix}.state.tx")
    await producer.start()
    try:
        await producer.begin_transaction()
        for i in range(3):
            last = await (await producer.send(
                ops_settings.topics.threads, encode(ThreadState(thread_id=f"m{i}",
                                                                status="idle")),
                key=f"m{i}".encode(), partition=0))
        await producer.commit_transaction()
    finally:
        await producer.stop()
    states = StateDir(tmp_path / STORE_NAME, ops_settings.topics.threads, grace_s=600)
    await restore(ops_settings, states, [0])
    store, _ = states.open(0)
    try:  # as an owner that took the last record writes it: at the offset after it
        store.write((), last.offset + 1)
    finally:
        store.close()
    result = await run_cli(ops_settings, "state", "--json", "--dir", str(tmp_path))
    assert result.code == 0, result.stderr
    (row,) = [r for r in result.json_lines() if r["partition"] == 0]
    assert row["end"] == row["offset"] + 1  # the marker
    assert row["behind"] == 0


async def test_state_lists_the_producers_checkpoint_stores_against_their_topic(
    ops_settings: KafkaSettings, writer: Writer, tmp_path: Path
) -> None:
    topic = ops_settings.topics.checkpoints
    placed = [await writer.send(topic, f"t{i}", cp.to_bytes(cp.fresh(f"t{i}")))
              for i in range(3)]
    partitions = sorted({p for p, _ in placed})
    states = StateDir(tmp_path / CHECKPOINTS, ops_settings.topics.checkpoints, grace_s=600)
    opened = {p: states.open(p) for p in partitions}
    try:
        done = await catch_up(ops_settings, topic, opened, checkpoint_changes, "test-restore")
    finally:
        for store, _ in opened.values():
            store.close()
    assert sum(r.records for r in done.values()) == 3
    result = await run_cli(ops_settings, "state", "--json", "--dir", str(tmp_path))
    assert result.code == 0, result.stderr
    rows = result.json_lines()
    assert {r["store"] for r in rows} == {CHECKPOINTS}
    assert sorted(r["partition"] for r in rows) == partitions
    assert all(r["behind"] == 0 for r in rows)


async def test_state_lists_each_consumer_instances_thread_view_stores(
    ops_settings: KafkaSettings, writer: Writer, tmp_path: Path
) -> None:
    """The consumer service keeps a store per instance (two on one machine never share
    one): ``state`` names the instance with each row, and a deployment of another
    prefix sharing the directory is not listed."""
    placed = [await writer.state(ThreadState(thread_id=f"c{i}", status="idle"))
              for i in range(6)]
    partitions = sorted({p for p, _ in placed})
    home = tmp_path / CONSUMER_THREADS / ops_settings.topics.threads
    for instance in ("127.0.0.1_8000", "127.0.0.1_8001"):
        await restore(ops_settings, StateDir(home, instance, grace_s=600), partitions)
    foreign = StateDir(tmp_path / CONSUMER_THREADS / "other.threads", "127.0.0.1_8000", 600)
    foreign.open(0)[0].close()

    result = await run_cli(ops_settings, "state", "--json", "--dir", str(tmp_path))
    assert result.code == 0, result.stderr
    rows = result.json_lines()
    assert sorted((r["store"], r["partition"]) for r in rows) == sorted(
        (f"{CONSUMER_THREADS}/{instance}", p)
        for instance in ("127.0.0.1_8000", "127.0.0.1_8001") for p in partitions)
    assert all(r["behind"] == 0 for r in rows)


async def test_a_stray_or_misplaced_store_is_listed_with_why_beside_the_others(
    ops_settings: KafkaSettings, writer: Writer, tmp_path: Path
) -> None:
    """A directory for a partition the topic lacks (``p99``) made ``state`` wait 40 s for
    its end offset, then fail the whole listing as if the broker were down (found by
    probing); a store copied into another partition's place was shown as that one's."""
    partition, _ = await writer.state(ThreadState(thread_id="t0", status="idle"))
    states = StateDir(tmp_path / STORE_NAME, ops_settings.topics.threads, grace_s=600)
    await restore(ops_settings, states, [partition])
    states.path(99).mkdir()
    other = (partition + 1) % ops_settings.partitions
    shutil.copytree(states.path(partition), states.path(other))
    result = await run_cli(ops_settings, "state", "--json", "--dir", str(tmp_path),
                           within_s=30)
    assert result.code == 0, result.stderr + result.stdout
    rows = {r["partition"]: r for r in result.json_lines()}
    assert sorted(rows) == sorted({partition, other, 99})
    assert "error" not in rows[partition]
    assert rows[partition]["behind"] == 0
    assert "has no partition 99" in rows[99]["error"]
    assert "end" not in rows[99]
    assert f"holds partition {partition}'s state, not partition {other}'s" in rows[other]["error"]


async def test_stuck_and_threads_keep_one_record_per_thread_not_its_history(
    ops_settings: KafkaSettings, writer: Writer, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``threads`` keeps a day of uncompacted history; ``stuck`` and ``threads`` read all of
    it into one list (1,000 versions of 30 KB: 250 MB more; found by probing). They keep
    what they show of the last record of each key as they read."""
    for n in range(300):  # one thread, interrupted again and again
        await writer.interrupted("th-busy", f"r{n}", [Interrupt(id=f"i{n}", reason="input")])
    await writer.interrupted("th-gone", "g1", [Interrupt(id="g", reason="input")])
    await writer.send(ops_settings.topics.threads, "th-gone", None)  # deleted: a tombstone
    kept: list[list[object]] = []
    real = TopicReader.latest_shaped

    async def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the whole history was read into memory")

    async def counting(self: TopicReader, *args: Any, **kwargs: Any) -> list[Any]:
        shaped = await real(self, *args, **kwargs)
        kept.append(shaped)
        return shaped

    monkeypatch.setattr(TopicReader, "read_all", refuse)
    monkeypatch.setattr(TopicReader, "latest_shaped", counting)
    capsys.readouterr()
    assert await _list(ops_settings, None, False, None, True) == 0
    listed = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert await _stuck(ops_settings, timedelta(minutes=5), True) == 0
    assert len(kept) == 2
    for shaped in kept:  # one per key as read: th-busy's last state, th-gone's tombstone
        assert len(shaped) == 2
        assert shaped[1] is None
    assert [(row["threadId"], row["runId"]) for row in listed] == [("th-busy", "r299")]
