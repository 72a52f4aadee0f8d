"""The census after a takeover (``takeover.follow``): decoded while decisions go on.

A takeover no longer decodes every interrupted thread before its first
decision; ``follow`` does it afterwards, yielding to the loop. These pin what
makes that safe: a thread committed meanwhile keeps its committed (newer)
state, a partition handed back meanwhile is left alone, and the marks are the
store's at the moment ``follow`` started reading them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gatekeeper_builders import NOW, interrupt

from contracts import OpenInterrupt, ThreadState
from services.gatekeeper.census import Counts, slim
from services.gatekeeper.takeover import FOLLOW_CHUNK, follow
from services.gatekeeper.telemetry import Telemetry
from services.gatekeeper.threadstore import ThreadStates
from services.state.cache import ByteLRU
from services.state.disk import PartitionStore

pytestmark = pytest.mark.unit

THREADS = FOLLOW_CHUNK * 3 + 7  # follow yields to the loop several times


def interrupted(thread_id: str) -> ThreadState:
    return ThreadState(thread_id=thread_id, status="interrupted", run_id="r1",
                       open_interrupts=[OpenInterrupt(run_id="r1", interrupt=interrupt("a"))])


def idle(thread_id: str) -> ThreadState:
    return ThreadState(thread_id=thread_id, status="idle", recent_run_ids=["r1"])


def taken_over(tmp_path: Path, name: str) -> Any:
    """An instance that has just taken partition 0 over, its census still to follow."""
    store = PartitionStore.open(tmp_path / "p0", 0)
    states = ThreadStates(0, store=store, cache=ByteLRU(0))
    states.install({f"t{n}": interrupted(f"t{n}") for n in range(THREADS)}, {}, 1)
    telemetry = Telemetry(name, interval_s=1, running_limit_s=300)
    return SimpleNamespace(owned={0: SimpleNamespace(states=states)}, following={0: set()},
                           telemetry=telemetry, expirer=None, threads=None)


def counts(st: Any) -> Counts:
    found: Counts = st.telemetry.census.count(NOW, timedelta(hours=1))
    return found


async def test_every_interrupted_thread_is_counted_once_the_census_has_followed(
        tmp_path: Path) -> None:
    st = taken_over(tmp_path, "g-follow-all")
    await follow(st, [0])
    assert st.following == {}
    assert counts(st).interrupted == THREADS


async def test_a_thread_committed_while_the_census_follows_keeps_its_committed_state(
        tmp_path: Path) -> None:
    st = taken_over(tmp_path, "g-follow-commit")
    following = asyncio.create_task(follow(st, [0]))
    await asyncio.sleep(0)  # follow has read the marks and decoded its first chunk
    assert not following.done()
    # a commit meanwhile (as commit.py does it): t0 answered, t-new interrupted
    st.owned[0].states.install({"t0": idle("t0"), "t-new": interrupted("t-new")}, {}, 2)
    st.telemetry.census.update(0, {"t0": idle("t0"), "t-new": interrupted("t-new")})
    st.following[0].update({"t0", "t-new"})
    await following
    watched = {s.thread_id: s for s in st.telemetry.census.states()}
    assert "t0" not in watched  # what follow read of it was older than the commit
    assert watched["t-new"] == slim(interrupted("t-new"))
    assert counts(st).interrupted == THREADS  # THREADS - t0 + t-new


async def test_a_partition_handed_back_while_the_census_follows_is_left_alone(
        tmp_path: Path) -> None:
    st = taken_over(tmp_path, "g-follow-release")
    following = asyncio.create_task(follow(st, [0]))
    await asyncio.sleep(0)
    st.owned.pop(0)  # release(): another instance counts it now
    st.following.pop(0)
    await following
    assert st.telemetry.census.states() == []


async def test_a_census_that_fails_stops_collecting_what_is_committed_for_it(
        tmp_path: Path) -> None:
    """Commits add their threads to the set a census will leave out; one that failed
    never takes them, and the set grew with every thread committed until the next
    rebalance (found by review)."""
    st = taken_over(tmp_path, "g-follow-fails")

    def unreadable() -> Any:
        raise OSError("the store's marks cannot be read")

    st.owned[0].states.watched_lazily = unreadable
    await follow(st, [0])
    assert st.following == {}
