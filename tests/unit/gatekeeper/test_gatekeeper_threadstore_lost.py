"""The gatekeeper's thread states over a store that vanishes or cannot be read while it runs:
never a store recreated empty and up to date (threads read as new, runs admitted past their
interrupts), never a read error taken as a new thread."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ag_ui.core import Interrupt
from rocksdict import Rdict

from contracts import OpenInterrupt, ThreadState
from services.gatekeeper.threadstore import Threads, ThreadStates
from services.state.disk import StoreError, peek

pytestmark = pytest.mark.unit


def interrupted(thread_id: str, message: str | None = None) -> ThreadState:
    return ThreadState(
        thread_id=thread_id, status="interrupted", run_id="r1", interrupted_run_id="r1",
        recent_run_ids=["r1"],
        open_interrupts=[OpenInterrupt(run_id="r1", interrupt=Interrupt(
            id="i1", reason="ok", message=message))])


def opened(tmp_path: Path) -> tuple[Threads, ThreadStates]:
    threads = Threads(tmp_path / "state", "agui.threads", cache_mb=0, grace_s=60)
    store, _ = threads.dir.open(0)
    states = ThreadStates(0, store=store, cache=threads.cache)
    threads.open[0] = states
    return threads, states


def test_a_vanished_store_is_not_reopened_empty_and_stays_failing(tmp_path: Path) -> None:
    threads, states = opened(tmp_path)
    states.install({"old": interrupted("old")}, {}, 1)
    assert states.pending == {}
    assert states.store is not None
    path = states.store.path
    shutil.rmtree(tmp_path / "state")
    offset = 2
    while not threads.failing() and offset < 100:
        states.install({f"big-{offset}": interrupted(f"big-{offset}", "x" * 300_000)}, {},
                       offset)
        offset += 1
    assert threads.failing(), "the store never failed"
    for n in range(3):  # the next commits: no reopen creates a store at the path
        states.install({f"new-{n}": interrupted(f"new-{n}")}, {}, offset + n)
    assert "restart" in threads.failing().get("state-store-0", ""), (
        "a store created in place of the vanished one was taken as up to date")
    assert states.get("old") == interrupted("old"), "an interrupted thread reads as new"
    assert "damaged" in (peek(path, 0).error or ""), "agui-relay state lists it up to date"
    threads.close()


def test_a_lookup_the_store_answers_with_an_error_is_not_a_new_thread(
        tmp_path: Path) -> None:
    threads, states = opened(tmp_path)
    states.install({"old": interrupted("old")}, {}, 1)
    assert states.store is not None
    db: Rdict = states.store._db
    db.close()  # every read errs now
    with pytest.raises(StoreError):  # the decision loop stops: its restart rebuilds the store
        states.get("old")
    assert "state-store-0" in threads.failing(), "/readyz passes"
    states.install({"new": interrupted("new")}, {}, 2)
    assert "state-store-0" in threads.failing(), "a write made it readable again"
    threads.close()
