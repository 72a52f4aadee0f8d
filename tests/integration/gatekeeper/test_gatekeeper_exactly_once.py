"""Exactly once under crashes: 5,000 requests, 1,000 threads, at least 3 SIGKILLs.

Each of 1,000 threads gets five run requests at once; under the enqueue
policy the gatekeeper admits the first and queues the rest, and a stand-in
worker finishes every dispatched run at once, so each finish lets the next
queued run through. Meanwhile the gatekeeper child process is SIGKILLed
(no transaction finishes, no group is left) at three points and restarted.
An independent checker reading ``decisions`` and ``dispatch`` with
read_committed then finds, for every requestId, exactly one final decision
(after at most one ``queued``), every run admitted and dispatched exactly
once, in order on its thread. It runs with the thread states in memory and
in on-disk stores (``AGUI_STATE_DIR``: each restart restores only what the
store had not installed when the process died), and batching
(``AGUI_GATEKEEPER_BATCH_MS``: each fetch waits to fill, and batches wait for
the interval and ride one transaction together).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from gatekeeper_harness import (
    EchoWorker,
    GatekeeperProcess,
    Topics,
    check_exactly_once,
    final_decisions,
    run_request,
)

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 1000
RUNS_PER_THREAD = 5
TOTAL = THREADS * RUNS_PER_THREAD
KILL_AT = (0.15, 0.4, 0.65)


@pytest.mark.parametrize("store", ["memory", "disk", "batched"])
async def test_exactly_once_while_the_gatekeeper_is_killed_and_restarted(
    kafka: KafkaSettings, topics: Topics, processes: Callable[..., GatekeeperProcess],
    store: str, tmp_path: Path,
) -> None:
    env = {"AGUI_STATE_DIR": str(tmp_path / "state")} if store == "disk" else {}
    if store == "batched":  # in memory; fetches wait up to 50 ms to fill, transactions
        env = {"AGUI_GATEKEEPER_BATCH_MS": "50"}  # at least 50 ms apart (``pacing``)
    gatekeeper = processes(kafka, AGUI_BUSY_POLICY="enqueue", **env)
    requests = [
        run_request(f"q{t}-{n}", f"t{t}", f"r{n}")
        for n in range(RUNS_PER_THREAD)
        for t in range(THREADS)
    ]
    started = time.monotonic()
    gatekeeper.start()
    await gatekeeper.ready()
    kills = 0
    async with EchoWorker(topics):
        await topics.requests(requests)
        for fraction in KILL_AT:
            await topics.until(
                lambda f=fraction: final_decisions(topics) >= f * TOTAL,
                within=90,
                what=f"{fraction:.0%} of the decisions",
            )
            gatekeeper.kill()
            kills += 1
            gatekeeper.start()
            await gatekeeper.ready()
        await topics.until(
            lambda: final_decisions(topics) >= TOTAL and len(topics.dispatches) >= TOTAL,
            within=120,
            what="every request decided and every run dispatched",
        )
        await asyncio.sleep(2)  # room for any duplicate a crash could still commit
    assert kills >= 3
    check_exactly_once(topics, requests)
    finals = [ds[-1] for ds in topics.decisions.values()]
    assert {d.verdict for d in finals} == {"admitted"}
    order: dict[str, list[str]] = defaultdict(list)
    for dispatch in topics.dispatches:
        order[dispatch.input.thread_id].append(dispatch.input.run_id)
    assert all(runs == [f"r{n}" for n in range(RUNS_PER_THREAD)] for runs in order.values())
    assert len(order) == THREADS
    print(f"\n{TOTAL} requests, {kills} SIGKILLs, {time.monotonic() - started:.1f} s")
    assert gatekeeper.terminate() == 0
