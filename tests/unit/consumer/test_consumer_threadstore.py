"""The thread view's store: instance names, marks, what records change, a failing disk,
lookups in the thread's partition only, the threads counted."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from ag_ui.core import Interrupt

from contracts import OpenInterrupt, ThreadState, encode
from services.consumer.threadstore import (
    ThreadStore,
    changes,
    decoded,
    instance_name,
    interrupted,
)
from services.kafka.partitioning import partition_for
from services.state.disk import PartitionStore


class Record(NamedTuple):
    key: bytes | None
    value: bytes | None


@pytest.mark.parametrize(("url", "name"), [
    ("http://127.0.0.1:8000", "127.0.0.1_8000"),
    ("http://relay-0.relay.svc:8000/", "relay-0.relay.svc_8000"),
    ("https://[::1]:9000", "_1_9000"),
    ("", "default"),
])
def test_an_instance_is_named_by_its_advertised_host_and_port(url: str, name: str) -> None:
    assert instance_name(url) == name


def test_instances_on_one_machine_get_different_names() -> None:
    assert instance_name("http://127.0.0.1:8000") != instance_name("http://127.0.0.1:8001")


@pytest.mark.parametrize(("value", "marked"), [
    (b'{"threadId":"t","openInterrupts":[{"runId":"r"}]}', True),
    (b'{"threadId":"t","openInterrupts":[]}', False),
    (b'{"threadId":"t"}', False),
    (b'[1,2]', False),
    (b"not json", False),
])
def test_a_state_is_marked_when_it_holds_open_interrupts(value: bytes, marked: bool) -> None:
    assert interrupted(value) is marked


def test_records_change_the_store_as_written() -> None:
    open_ = b'{"openInterrupts":[{"runId":"r"}]}'
    idle = b'{"status":"idle"}'
    out = changes(0, [Record(b"a", open_), Record(b"b", idle), Record(b"c", None),
                      Record(None, idle), Record(b"d", b"garbage")])
    assert out == [(b"a", open_, open_), (b"b", idle, None), (b"c", None, None),
                   (b"d", b"garbage", None)]


class Polled(NamedTuple):
    key: bytes | None
    value: bytes | None
    offset: int


def thread_state(thread: str, *, waiting: bool) -> bytes:
    return encode(ThreadState(
        thread_id=thread, status="interrupted" if waiting else "idle", agent="a", run_id="r",
        interrupted_run_id="r" if waiting else None,
        open_interrupts=[OpenInterrupt(run_id="r", interrupt=Interrupt(id="i", reason="x"))]
        if waiting else []))


def test_a_store_that_cannot_be_written_keeps_the_states_and_fails_until_it_can(
        tmp_path: Path) -> None:
    threads = ThreadStore(tmp_path, "p.threads", "i1", cache_mb=1)
    threads.stores[0] = threads.dir.open(0)[0]
    try:
        threads.write(0, [Polled(b"a", thread_state("a", waiting=False), 0)])
        threads.stores[0]._db.close()  # every write now fails, as on a full disk
        threads.write(0, [Polled(b"b", thread_state("b", waiting=True), 1),
                          Polled(b"a", None, 2)])
        failing = threads.failing()
        held = (threads.get("a"), threads.get("b"))
        threads.write(0, [Polled(b"c", thread_state("c", waiting=False), 3)])
        after = threads.failing()
        stored = [threads.stores[0].get(k) is not None for k in (b"a", b"b", b"c")]
        checkpoint = threads.stores[0].checkpoint
        marked = [t for t, _ in threads.marked()]
    finally:
        threads.close()
    assert list(failing) == ["thread-store-0"]
    assert "2 states held in memory" in failing["thread-store-0"]
    assert held[0] is None  # deleted while the store could not take it
    assert held[1] is not None
    assert held[1].status == "interrupted"
    assert (after, stored, checkpoint, marked) == ({}, [False, True, True], 4, ["b"])


def test_a_state_keyed_otherwise_than_its_thread_id_is_skipped_on_disk_and_in_memory(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """README (Limits): another writer's state under a thread's key is not that thread's,
    so ``GET /threads/{key}`` must not answer it (it answered a body naming another)."""
    threads = ThreadStore(tmp_path, "p.threads", "i1", cache_mb=1)
    threads.stores[0] = threads.dir.open(0)[0]
    try:
        threads.write(0, [Polled(b"t9", thread_state("t9other", waiting=True), 0),
                          Polled(b"t8", thread_state("t8", waiting=False), 1)])
        on_disk = (threads.get("t9"), threads.get("t8"))
    finally:
        threads.close()
    in_memory = decoded("t9", thread_state("t9other", waiting=False))
    assert (on_disk[0], in_memory) == (None, None)
    assert on_disk[1] is not None
    assert on_disk[1].thread_id == "t8"
    assert "names thread t9other: skipped" in caplog.text


def test_a_thread_is_looked_up_in_its_partitions_store_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown thread cost a lookup in every partition's store (64 on 64 partitions)."""
    partitions = 16
    threads = ThreadStore(tmp_path, "p.threads", "i1", cache_mb=1)
    looked: list[int] = []
    try:
        for p in range(partitions):
            threads.stores[p] = threads.dir.open(p)[0]
        for i, name in enumerate(f"t{n}" for n in range(40)):
            p = partition_for(name, partitions)
            threads.write(p, [Polled(name.encode(), thread_state(name, waiting=False), i)])
        read = PartitionStore.get

        def counted(store: PartitionStore, key: bytes) -> bytes | None:
            looked.append(store.partition)
            return read(store, key)

        monkeypatch.setattr(PartitionStore, "get", counted)
        unknown = threads.get("nobody")
        unknown_looked, looked[:] = list(looked), []
        known = threads.get("t7")
    finally:
        threads.close()
    assert (unknown, unknown_looked) == (None, [partition_for("nobody", partitions)])
    assert known is not None
    assert (known.thread_id, looked) == ("t7", [partition_for("t7", partitions)])


def test_the_stores_count_the_threads_they_hold(tmp_path: Path) -> None:
    """The "thread view caught up" line counts these: the in-memory dict is empty then."""
    threads = ThreadStore(tmp_path, "p.threads", "i1", cache_mb=1)
    try:
        for p in range(4):
            threads.stores[p] = threads.dir.open(p)[0]
        for i in range(30):
            name = f"t{i}"
            threads.write(partition_for(name, 4),
                          [Polled(name.encode(), thread_state(name, waiting=i % 3 == 0), i)])
        threads.write(partition_for("t0", 4), [Polled(b"t0", None, 30)])
        counted = threads.count()
    finally:
        threads.close()
    assert counted == 29
