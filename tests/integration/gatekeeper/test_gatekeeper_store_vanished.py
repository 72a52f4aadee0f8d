"""The gatekeeper's state directory deleted while it runs (as an operator freeing a full disk
would: the stores are a cache of the ``threads`` topic). The stores were reopened empty at
the next commit and stamped with the current changelog offset: every thread read as new,
and runs were admitted past their open interrupts. Now the stores are lost: not ready,
decided on what their open files and memory still hold, until a restart rebuilds them."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Interrupt
from gatekeeper_harness import Topics, run_request, settings_for

from services.gatekeeper.processor import Processor
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 8
BIG = 200_000
"""An interrupt's message this long: a few such states need RocksDB's next log file,
which cannot be created in a directory that is gone."""


@pytest.fixture
def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    """One partition: one store."""
    return settings_for(kafka_bootstrap, topic_prefix, partitions=1)


async def interrupted_threads(topics: Topics) -> None:
    for t in range(THREADS):
        d = await topics.decide(run_request(f"q{t}", f"t{t}", "r1"))
        assert d.verdict == "admitted"
        await topics.started(f"t{t}", "r1")
        await topics.finished(f"t{t}", "r1", Interrupt(id=f"a{t}", reason="approve"))
    await topics.until(lambda: sum(1 for t in range(THREADS) if getattr(
        topics.threads.get(f"t{t}"), "status", None) == "interrupted") == THREADS,
        what="every thread interrupted")
    await asyncio.sleep(0.5)  # the last commit's store write


async def test_stores_deleted_under_the_gatekeeper_are_not_reopened_empty_and_up_to_date(
    kafka: KafkaSettings, topics: Topics, in_process: Any, tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    processor: Processor = await in_process(kafka, state_dir=state_dir, state_cache_mb=0,
                                            gc_full_s=3600)
    await interrupted_threads(topics)
    control = await topics.decide(run_request("c0", "t0", "r-control"))
    assert control.verdict == "rejected"  # an interrupted thread: a plain run is refused

    shutil.rmtree(state_dir / "gatekeeper-threads")  # "a cache of the threads topic"
    for n in range(12):  # big states: more than RocksDB's open log file takes
        d = await topics.decide(run_request(f"fill{n}", f"big-{n}", "r1"))
        assert d.verdict == "admitted"
        await topics.started(f"big-{n}", "r1")
        await topics.finished(f"big-{n}", "r1",
                              Interrupt(id=f"b{n}", reason="approve", message="x" * BIG))
        await topics.until(lambda n=n: getattr(topics.threads.get(f"big-{n}"), "status", None)
                           == "interrupted", what=f"big-{n} interrupted")
        await asyncio.sleep(0.2)
        if processor.failing:
            break

    for n in range(THREADS):  # the next commits reopen the stores
        d = await topics.decide(run_request(f"more{n}", f"fresh-{n}", "r1"))
        assert d.verdict == "admitted"
    await asyncio.sleep(0.5)

    admitted = []
    for t in range(THREADS):
        d = await topics.decide(run_request(f"n{t}", f"t{t}", "r-past"))
        if d.verdict == "admitted":
            admitted.append(f"t{t}")
    assert admitted == [], (
        f"runs admitted past an open interrupt on {admitted}: the stores were reopened "
        f"empty and stamped up to date; failing now: {processor.failing}")
    assert any("restart" in why for why in processor.failing.values()), processor.failing
