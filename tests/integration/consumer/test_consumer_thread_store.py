"""The thread view on its on-disk stores (``AGUI_STATE_DIR``), on the real broker.

A view restarted over its stores reads only the records written while it
was away (counted), and hands the inbox's index every thread with open
interrupts from the stores' marks; a store deleted or filled with garbage
is rebuilt from the topic; ``GET /threads/{id}`` and ``GET /interrupts``
answer the same with the stores as without, before and after a restart.
"""

from __future__ import annotations

import asyncio
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Interrupt
from consumer_harness import AGENT, Backstage, serving

from contracts import OpenInterrupt, ThreadState
from deploy.kafka.probe import free_port
from services.consumer.threads import ThreadView
from services.consumer.threadstore import ThreadStore, interrupted
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

WAIT_S = 30


def state(thread: str, n: int, *, interrupted: bool = False) -> ThreadState:
    run = f"run-{n}"
    return ThreadState(
        thread_id=thread, status="interrupted" if interrupted else "idle", agent=AGENT,
        run_id=run, interrupted_run_id=run if interrupted else None, recent_run_ids=[run],
        open_interrupts=[OpenInterrupt(run_id=run, interrupt=Interrupt(
            id=f"i-{thread}", reason="tool_approval"))] if interrupted else [],
        updated_at=datetime(2026, 1, 2, 3, 4, n % 60, tzinfo=UTC))


async def viewed(kafka: KafkaSettings, root: Path) -> tuple[ThreadView, list[str]]:
    """A started view over the stores under ``root``, caught up; the threads its listener
    was told of holding open interrupts."""
    told: list[str] = []
    view = ThreadView(kafka, ThreadStore(root, kafka.topics.threads, "i1", cache_mb=1))
    view.listeners.append(lambda t, v: told.append(t) if v and interrupted(v) else None)
    await view.start()
    async with asyncio.timeout(WAIT_S):
        await view.caught_up.wait()
    return view, told


async def stopped(view: ThreadView) -> None:
    await view.stop()
    assert view.store is not None
    view.store.close()


async def test_a_restarted_view_reads_only_the_delta_and_rebuilds_the_inbox_from_marks(
        kafka: KafkaSettings, backstage: Backstage, tmp_path: Path) -> None:
    for n in range(30):
        await backstage.write_state(state(f"th-{n}", n, interrupted=n % 10 == 0), f"th-{n}")
    view, _ = await viewed(kafka, tmp_path)
    first_restore = view.store.records_restored if view.store else -1
    await stopped(view)

    await backstage.write_state(state("th-3", 99, interrupted=True), "th-3")
    await backstage.write_state(None, "th-10")
    await backstage.write_state(state("th-new", 7), "th-new")
    view, told = await viewed(kafka, tmp_path)
    try:
        assert view.store is not None
        restored, read = view.store.records_restored, view.records_read
        old, changed, gone, new = (view.get("th-1"), view.get("th-3"), view.get("th-10"),
                                   view.get("th-new"))
        await backstage.write_state(state("th-live", 1), "th-live")
        async with asyncio.timeout(WAIT_S):
            while view.get("th-live") is None:
                await view.progress.next(1)
        live_read = view.records_read
    finally:
        await stopped(view)
    assert first_restore == 30
    assert (restored, read) == (3, 0)  # the delta only, nothing read again
    assert old is not None
    assert old.run_id == "run-1"
    assert changed is not None
    assert changed.status == "interrupted"
    assert gone is None
    assert new is not None
    assert sorted(told) == ["th-0", "th-20", "th-3"]  # from the marks: no scan
    assert live_read == 1  # followed on, written to the store as it goes

    # The store it followed on with restores with nothing more to read.
    view, _ = await viewed(kafka, tmp_path)
    try:
        assert view.store is not None
        assert view.store.records_restored == 0
        assert view.get("th-live") is not None
    finally:
        await stopped(view)


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
async def test_a_deleted_or_garbage_store_is_rebuilt_from_the_topic(
        kafka: KafkaSettings, backstage: Backstage, tmp_path: Path, damage: str) -> None:
    for n in range(12):
        await backstage.write_state(state(f"th-{n}", n, interrupted=n == 5), f"th-{n}")
    view, _ = await viewed(kafka, tmp_path)
    await stopped(view)
    home = tmp_path / "consumer-threads" / kafka.topics.threads / "i1"
    assert list(home.glob("p*"))
    for part in home.glob("p*"):
        if part.is_dir():
            shutil.rmtree(part)
            if damage == "garbage":
                part.mkdir()
                (part / "CURRENT").write_bytes(b"\x00not a database\xff" * 64)
                (part / "MANIFEST-000001").write_bytes(b"garbage")
    view, told = await viewed(kafka, tmp_path)
    try:
        assert view.store is not None
        restored = view.store.records_restored
        found = [view.get(f"th-{n}") for n in range(12)]
    finally:
        await stopped(view)
    assert restored == 12
    assert all(s is not None and s.run_id == f"run-{n}" for n, s in enumerate(found))
    assert told == ["th-5"]


async def answers(kafka: KafkaSettings, threads: list[str], **overrides: Any
                  ) -> tuple[list[Any], Any]:
    async with serving(kafka, **overrides) as app:
        async with asyncio.timeout(WAIT_S):
            while (await app.http.get("/readyz")).status_code != 200:
                await asyncio.sleep(0.05)
        got = [(r.status_code, r.json()) for r in
               [await app.http.get(f"/threads/{t}") for t in threads]]
        listing = (await app.http.get("/interrupts")).json()
    listing.pop("now")  # the clock of the answer
    return got, listing


async def test_threads_and_interrupts_answer_the_same_with_the_store_as_without(
        kafka: KafkaSettings, backstage: Backstage, tmp_path: Path) -> None:
    for n in range(8):
        await backstage.write_state(state(f"th-{n}", n, interrupted=n % 3 == 0), f"th-{n}")
    await backstage.write_state(None, "th-6")
    threads = [f"th-{n}" for n in range(8)] + ["th-unknown"]
    url = f"http://127.0.0.1:{free_port()}"  # one instance name: the same store both times
    without = await answers(kafka, threads)
    stored = await answers(kafka, threads, state_dir=tmp_path, advertised_url=url)
    restarted = await answers(kafka, threads, state_dir=tmp_path, advertised_url=url)
    assert without[0][0][0] == 200
    assert without[0][6][0] == 404
    assert len(without[1]["interrupts"]) == 2
    assert stored == without
    assert restarted == without
    assert any((tmp_path / "consumer-threads").iterdir())


async def test_a_view_whose_stores_cannot_be_used_says_why(
        kafka: KafkaSettings, backstage: Backstage, tmp_path: Path) -> None:
    """``AGUI_STATE_DIR`` naming a file: the view stops, and readiness says why (it said
    nothing until shutdown)."""
    root = tmp_path / "a-file"
    root.write_bytes(b"not a directory")
    view = ThreadView(kafka, ThreadStore(root, kafka.topics.threads, "i1", cache_mb=1))
    await view.start()
    try:
        async with asyncio.timeout(WAIT_S):
            while view.failure is None:
                await asyncio.sleep(0.05)
        assert "its on-disk stores cannot be used" in view.failure
        assert "NotADirectoryError" in view.failure or "FileExistsError" in view.failure
        assert not view.caught_up.is_set()
    finally:
        await view.stop()  # the failed task's consumer is stopped too, and stop says so
    assert view.consumer is None
