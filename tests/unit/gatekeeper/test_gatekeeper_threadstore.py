"""``ThreadStates`` over a real on-disk store: reads through the cache, installs with the
changelog offset, marks what is not idle, and keeps what it could not write."""

from __future__ import annotations

from pathlib import Path

import pytest
from gatekeeper_builders import interrupt, running
from prometheus_client import generate_latest

from contracts import OpenInterrupt, ThreadState
from services.gatekeeper import wire
from services.gatekeeper.census import slim
from services.gatekeeper.threadstore import Threads, ThreadStates, changes, slim_raw
from services.state.cache import ByteLRU
from services.state.disk import PartitionStore

pytestmark = pytest.mark.unit


def idle(thread_id: str) -> ThreadState:
    return ThreadState(thread_id=thread_id, status="idle", recent_run_ids=["r0"])


def interrupted(thread_id: str) -> ThreadState:
    return ThreadState(thread_id=thread_id, status="interrupted", run_id="r1",
                       open_interrupts=[OpenInterrupt(run_id="r1", interrupt=interrupt("a"))])


def test_installed_states_read_back_from_the_cache_and_then_from_the_store(
        tmp_path: Path) -> None:
    cache: ByteLRU[ThreadState] = ByteLRU(1 << 20)
    store = PartitionStore.open(tmp_path / "p0", 0)
    states = ThreadStates(0, store=store, cache=cache)
    t1 = running("r1", thread_id="t1")
    states.install({"t1": t1, "t2": idle("t2")}, {}, 42)
    assert states.get("t1") == t1
    assert cache.hits == 1
    assert store.checkpoint == 42
    cache.drop_partition(0)
    assert states["t1"] == t1  # decoded from the store
    assert states.get("missing") is None
    assert "t2" in states
    assert sorted(states) == ["t1", "t2"]
    assert len(states) == 2
    store.close()


def test_only_threads_not_idle_are_watched_and_a_later_idle_state_unmarks(
        tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p0", 0)
    states = ThreadStates(0, store=store, cache=ByteLRU(0))
    states.install({"a": interrupted("a"), "b": idle("b"), "c": running(thread_id="c")}, {}, 3)
    assert states.watched() == {"a": slim(interrupted("a")),
                                "c": slim(running(thread_id="c"))}
    states.install({"a": idle("a")}, {}, None)
    assert sorted(states.watched()) == ["c"]
    assert store.checkpoint == 3  # an install without an offset keeps the checkpoint
    store.close()


def test_states_the_store_cannot_take_stay_in_memory_and_are_written_once_it_can(
        tmp_path: Path) -> None:
    threads = Threads(tmp_path, "agui.threads", cache_mb=1, grace_s=60)
    store, _ = threads.dir.open(0)
    states = ThreadStates(0, store=store, cache=threads.cache)
    threads.open[0] = states
    store._db.close()  # every write fails now, as on a full disk
    states.install({"t1": interrupted("t1")}, {}, 10)
    assert states.failure is not None
    assert "state-store-0" in threads.failing()
    threads.cache.drop_partition(0)
    assert states.get("t1") == interrupted("t1")  # from memory, not lost
    states.install({"t2": idle("t2")}, {}, 12)  # reopened first: both written
    assert states.failure is None
    assert threads.failing() == {}
    assert states.pending == {}
    assert store.checkpoint == 12
    assert sorted(states.watched()) == ["t1"]
    threads.close()


def test_in_memory_states_are_a_plain_mapping() -> None:
    states = ThreadStates(1)
    states.install({"t": idle("t")}, {}, 5)
    assert dict(states) == {"t": idle("t")}
    assert states.watched() == {}


def test_a_stored_key_that_is_not_utf8_is_no_thread_and_the_others_are_watched(
        tmp_path: Path) -> None:
    """A store written before such keys were skipped still has them: listing the
    threads and the census of watched ones pass them by."""
    store = PartitionStore.open(tmp_path / "p0", 0)
    raw = wire.state(interrupted("a"))
    store.write([(b"\xffq", raw, slim_raw(raw)), (b"a", raw, slim_raw(raw))], 1)
    states = ThreadStates(0, store=store, cache=ByteLRU(1 << 20))
    assert sorted(states) == ["a"]
    assert sorted(states.watched()) == ["a"]
    store.close()


def test_a_store_value_that_does_not_decode_reads_as_a_new_thread(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p0", 0)
    store.write([(b"t", b'{"threadId": 5}', b"{}")], 1)
    states = ThreadStates(0, store=store, cache=ByteLRU(1 << 20))
    assert states.get("t") is None
    store.close()


class Rec:
    def __init__(self, key: bytes | None, value: bytes | None, offset: int = 0) -> None:
        self.key, self.value, self.offset, self.partition = key, value, offset, 0


def test_changelog_records_become_store_changes_as_restore_reads_them() -> None:
    records = [Rec(b"a", wire.state(interrupted("a"))), Rec(b"b", wire.state(idle("b"))),
               Rec(b"c", None), Rec(None, b"{}"), Rec(b"d", b"not json"),
               Rec(b"\xffq", wire.state(interrupted("q")))]
    found = changes(0, records)
    assert [(k, v) for k, v, _ in found] == [(b"a", records[0].value), (b"b", records[1].value),
                                              (b"c", None)]
    marks = [m for _, _, m in found]
    assert marks[1:] == [None, None]  # idle, deleted: not watched
    assert marks[0] is not None
    assert ThreadState.model_validate_json(marks[0]) == slim(interrupted("a"))
    with pytest.raises(ValueError, match="JSON object"):
        slim_raw(b"[1]")


def test_a_child_threads_mark_keeps_its_parent_run() -> None:
    child = interrupted("a/k-1").model_copy(update={"parent_run_id": "top-r1"})
    mark = slim_raw(wire.state(child))
    assert mark is not None
    assert ThreadState.model_validate_json(mark) == slim(child)
    assert slim(child).parent_run_id == "top-r1"  # the census counts its interrupts apart


def test_the_stores_are_on_the_metrics_page(tmp_path: Path) -> None:
    threads = Threads(tmp_path, "agui.threads", cache_mb=1, grace_s=60)
    store, _ = threads.dir.open(3)
    states = ThreadStates(3, store=store, cache=threads.cache)
    threads.open[3] = states
    states.install({"t": idle("t")}, {}, 17)
    states.get("t")
    states.get("other")
    page = generate_latest().decode()
    labels = '{partition="3",store="gatekeeper-threads"}'
    assert f"agui_state_store_offset{labels} 17.0" in page
    size = next(line for line in page.splitlines()
                if line.startswith(f"agui_state_store_bytes{labels}"))
    assert float(size.split()[-1]) > 0
    assert 'agui_state_cache_hit_ratio{store="gatekeeper-threads"}' in page
    threads.close()
