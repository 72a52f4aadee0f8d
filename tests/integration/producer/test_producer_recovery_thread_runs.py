"""Recovery tells two threads' runs of the same id apart.

A run id names a run within its thread only (the README's tour calls every thread's
first run ``r1``). A worker closing the runs a lost worker left open traced them on
``events`` and ``runs`` by the run id header alone: two threads' ``r1`` were one run.
A thread whose ``r1`` was cut short was judged closed by the other thread's end (no
``RUN_ERROR worker_lost``: its clients waited, and the thread stayed running), or got
the other thread's end copied onto its own stream (another tenant's, perhaps). Found by
review; recovery now matches a record's key as well as its run id.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from producer_harness import Relay, in_process_worker
from test_producer_recovery import interrupted, lay_down, started, wait_for

from contracts import EventHeaders
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

RUN = "r1"


def thread_run(relay: Relay, thread_id: str) -> list[dict[str, Any]]:
    """The events of ``thread_id``'s run ``r1`` as the topic holds them."""
    out = []
    for record in relay.order:
        headers = EventHeaders.decode(record.headers)
        if record.key == thread_id.encode() and headers is not None and headers.run_id == RUN:
            out.append(orjson.loads(record.value))
    return out


async def test_a_lost_run_is_closed_whatever_another_threads_run_of_its_id_wrote(
        kafka: KafkaSettings, relay: Relay) -> None:
    ended, cut = "t-ended", "t-cut"
    await lay_down(relay, ended, RUN, "scripted", [started(ended, RUN), interrupted(ended, RUN)])
    await lay_down(relay, cut, RUN, "scripted", [started(cut, RUN)])
    async with in_process_worker(kafka, "scripted"):
        await wait_for(lambda: any(e["type"] == "RUN_ERROR" for e in thread_run(relay, cut)),
                       20, f"{cut}'s run closed")
    cut_run = thread_run(relay, cut)
    assert [e["type"] for e in cut_run] == ["RUN_STARTED", "RUN_ERROR"], cut_run
    assert cut_run[-1]["code"] == "worker_lost"
    assert [e["type"] for e in thread_run(relay, ended)] == ["RUN_STARTED", "RUN_FINISHED"]
    assert all(e.get("threadId") in (None, cut) for e in cut_run)
