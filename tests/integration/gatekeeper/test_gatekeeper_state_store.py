"""The gatekeeper's on-disk thread stores (``AGUI_STATE_DIR``) on a real broker.

- Many threads (20,000 here; the issue's 200,000 is the benchmark's scale,
  ``make bench``), written straight to the compacted ``threads`` topic in
  the contract's wire form: the first start restores them all; after a
  SIGKILL, while another party wrote a few more states, the restart reads
  only those (counted from its restore log line) and decides new requests
  on old threads as the changelog says.
- A store directory deleted, truncated or filled with garbage between runs
  is rebuilt from the topic, and the decisions are the same.
- A gatekeeper that dies between a transaction's commit and the store write
  (commit step 6) restores to the committed states: the store catches up.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Interrupt
from gatekeeper_harness import GatekeeperProcess, Topics, cancelled, resolved, run_request

from contracts import OpenInterrupt, ThreadState
from services.gatekeeper import wire
from services.gatekeeper.processor import Processor
from services.gatekeeper.settings import GatekeeperSettings
from services.gatekeeper.threadstore import ThreadStates
from services.kafka.clients import new_producer
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

MANY = 20_000
EVERY_INTERRUPTED = 50
"""One thread in this many is interrupted (interrupt ``i-<n>``), the rest idle."""


def old_state(n: int, *, status: str | None = None) -> ThreadState:
    thread_id = f"old-{n}"
    if status == "running" or (status is None and n % EVERY_INTERRUPTED):
        return ThreadState(thread_id=thread_id, status="running" if status else "idle",
                           agent="scripted", run_id=f"r{n}", recent_run_ids=[f"r{n}"])
    return ThreadState(
        thread_id=thread_id, status="interrupted", agent="scripted", run_id=f"r{n}",
        interrupted_run_id=f"r{n}", recent_run_ids=[f"r{n}"],
        open_interrupts=[OpenInterrupt(run_id=f"r{n}",
                                       interrupt=Interrupt(id=f"i-{n}", reason="approve"))])


async def write_states(kafka: KafkaSettings, states: Iterable[ThreadState]) -> int:
    """Thread states straight onto ``threads``, keyed (so partitioned) as the gatekeeper's."""
    producer = new_producer(kafka, "test-threads-writer", linger_ms=20)
    await producer.start()
    try:
        sent = [await producer.send(kafka.topics.threads, wire.state(s), key=s.thread_id.encode())
                for s in states]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return len(sent)


def restore_lines(gatekeeper: GatekeeperProcess) -> list[dict[str, Any]]:
    return [line for line in gatekeeper.log_lines()
            if "restored:" in str(line.get("msg", "")) and "records" in line]


async def test_a_restart_after_sigkill_reads_only_the_delta_and_decides_old_threads(
    kafka: KafkaSettings, topics: Topics, processes: Callable[..., GatekeeperProcess],
    tmp_path: Path,
) -> None:
    await write_states(kafka, (old_state(n) for n in range(MANY)))
    gatekeeper = processes(kafka, AGUI_STATE_DIR=str(tmp_path / "state"))
    gatekeeper.start()
    await gatekeeper.ready(within=120)
    first = restore_lines(gatekeeper)
    assert sum(int(line["records"]) for line in first) == MANY
    assert all(line["full"] for line in first)
    d = await topics.decide(run_request("q-new-on-old", "old-1", "r-new"))
    assert d.verdict == "admitted"
    gatekeeper.kill()

    delta = [old_state(n, status="running") for n in range(1000, 1040)]  # another owner's
    await write_states(kafka, delta)
    gatekeeper.start()
    await gatekeeper.ready(within=60)
    second = restore_lines(gatekeeper)
    read = sum(int(line["records"]) for line in second)
    assert not any(line["full"] for line in second)
    assert len(delta) <= read <= len(delta) + 1  # + the admission, if killed before its write

    n = EVERY_INTERRUPTED * 7  # an interrupted thread only the store remembers
    partial = await topics.decide(run_request("q-partial", f"old-{n}", "r-x",
                                              resume=resolved("nope")))
    assert (partial.verdict, partial.code) == ("rejected", "unknown_interrupt")
    full = await topics.decide(run_request("q-full", f"old-{n}", "r-y", resume=resolved(f"i-{n}")))
    assert full.verdict == "admitted"
    busy = await topics.decide(run_request("q-busy", "old-1010", "r-z"))
    assert (busy.verdict, busy.code) == ("rejected", "thread_busy")  # the delta's state
    again = await topics.decide(run_request("q-again", "old-1", "r-new"))
    assert (again.verdict, again.code) == ("rejected", "duplicate_run_id")  # before the kill
    assert gatekeeper.terminate() == 0


class Gatekeepers:
    """In-process gatekeepers that a test may stop one by one (a stop raises what ended it)."""

    def __init__(self) -> None:
        self.running: dict[int, tuple[asyncio.Event, asyncio.Task[None]]] = {}

    async def start(self, kafka: KafkaSettings, **env: Any) -> Processor:
        processor = Processor(kafka, GatekeeperSettings(**env))
        stop = asyncio.Event()
        task = asyncio.create_task(processor.run(stop))
        self.running[id(processor)] = (stop, task)
        await asyncio.wait([task, asyncio.create_task(processor.assigned.wait())],
                           timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        assert processor.assigned.is_set(), "the gatekeeper got no partitions in 60 s"
        return processor

    async def stop(self, processor: Processor) -> None:
        stop, task = self.running.pop(id(processor))
        stop.set()
        await asyncio.wait_for(task, 30)


@pytest.fixture
async def gatekeepers() -> AsyncIterator[Gatekeepers]:
    running = Gatekeepers()
    try:
        yield running
    finally:
        for stop, _ in running.running.values():
            stop.set()
        for _, task in running.running.values():
            await asyncio.gather(asyncio.wait_for(task, 30), return_exceptions=True)


def delete(path: Path) -> None:
    shutil.rmtree(path)


def truncate(path: Path) -> None:
    for child in sorted(path.rglob("*")):
        if child.is_file() and child.stat().st_size > 0:
            with child.open("r+b") as f:
                f.truncate(child.stat().st_size // 2)


def garbage(path: Path) -> None:
    for child in path.rglob("*"):
        if child.is_file():
            child.write_bytes(os.urandom(256))


async def decided_states(processor: Processor) -> dict[str, ThreadState]:
    found: dict[str, ThreadState] = {}
    for owned in processor.state.owned.values():
        found.update({t: owned.states[t] for t in owned.states})
    return found


@pytest.mark.parametrize("damage", [delete, truncate, garbage])
async def test_a_damaged_store_is_rebuilt_from_the_topic_and_decides_the_same(
    damage: Callable[[Path], None], kafka: KafkaSettings, topics: Topics,
    gatekeepers: Gatekeepers, tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    processor: Processor = await gatekeepers.start(kafka, state_dir=state_dir, gc_full_s=3600)
    for t in range(8):
        d = await topics.decide(run_request(f"q{t}", f"t{t}", "r1"))
        assert d.verdict == "admitted"
        await topics.started(f"t{t}", "r1")
        await topics.finished(f"t{t}", "r1", Interrupt(id=f"a{t}", reason="approve"),
                               Interrupt(id=f"b{t}", reason="approve"))
    await topics.until(lambda: sum(1 for t in range(8) if getattr(
        topics.threads.get(f"t{t}"), "status", None) == "interrupted") == 8,
        what="every thread interrupted")
    await asyncio.sleep(0.5)  # the last commit's store write
    before = await decided_states(processor)
    assert processor.state.threads is not None
    stores = [processor.state.threads.dir.path(p) for p in processor.partitions]
    await gatekeepers.stop(processor)

    for store in stores:
        damage(store)
    processor = await gatekeepers.start(kafka, state_dir=state_dir, gc_full_s=3600)
    assert processor.state.threads is not None
    restored = processor.state.threads.restored
    assert restored
    assert all(r.plan.full for r in restored.values())
    assert await decided_states(processor) == before
    for t in range(8):
        partial = await topics.decide(run_request(f"p{t}", f"t{t}", "r2", resume=resolved(f"a{t}")))
        assert (partial.verdict, partial.code) == ("rejected", "uncovered_interrupts")
        ok = await topics.decide(run_request(f"f{t}", f"t{t}", "r3",
                                             resume=[*resolved(f"a{t}"), *cancelled(f"b{t}")]))
        assert ok.verdict == "admitted"


async def test_killed_between_the_commit_and_the_store_write_the_store_catches_up(
    kafka: KafkaSettings, topics: Topics, gatekeepers: Gatekeepers,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    state_dir = tmp_path / "state"
    processor: Processor = await gatekeepers.start(kafka, state_dir=state_dir)
    d = await topics.decide(run_request("q1", "t1", "r1"))
    assert d.verdict == "admitted"
    await topics.started("t1", "r1")
    await topics.finished("t1", "r1", Interrupt(id="a", reason="approve"))
    install = ThreadStates.install

    def dies(self: ThreadStates, *args: Any) -> None:
        raise RuntimeError("killed after the commit, before the store write")

    await topics.until(lambda: getattr(topics.threads.get("t1"), "status", None)
                       == "interrupted", what="t1 interrupted")
    await asyncio.sleep(0.5)
    monkeypatch.setattr(ThreadStates, "install", dies)
    resumed = await topics.decide(run_request("q2", "t1", "r2", resume=resolved("a")))
    assert resumed.verdict == "admitted"  # committed: Kafka has it, the store does not
    with pytest.raises(RuntimeError, match="cannot continue"):
        await gatekeepers.stop(processor)
    monkeypatch.setattr(ThreadStates, "install", install)

    processor = await gatekeepers.start(kafka, state_dir=state_dir)
    assert processor.state.threads is not None
    restored = processor.state.threads.restored
    assert not any(r.plan.full for r in restored.values())
    assert sum(r.records for r in restored.values()) >= 1  # the admission's state, read again
    again = await topics.decide(run_request("q3", "t1", "r3", resume=resolved("a")))
    assert (again.verdict, again.code) == ("rejected", "thread_busy")  # r2 runs: not forgotten
