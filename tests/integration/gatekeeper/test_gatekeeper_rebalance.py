"""Two gatekeeper processes share the partitions through rebalances, exactly once.

A runs alone; B joins while requests flow (the group splits the four
partitions two and two); then A gets SIGTERM, finishes its transaction in
flight, leaves the group, and B takes everything. Requests keep coming in
waves the whole time, and a stand-in worker finishes every dispatched run.
The checker finds every request decided exactly once (after at most one
``queued``), every run dispatched once and in order per thread, and the
logs show who owned what.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

import pytest
from gatekeeper_harness import (
    EchoWorker,
    GatekeeperProcess,
    Topics,
    check_exactly_once,
    final_decisions,
    run_request,
)

from contracts import RunRequest
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 200
WAVES = 3
PER_WAVE = 2


def wave(n: int) -> list[RunRequest]:
    return [
        run_request(f"q{t}-{n}-{k}", f"t{t}", f"r{n}-{k}")
        for k in range(PER_WAVE)
        for t in range(THREADS)
    ]


async def test_two_gatekeepers_share_the_partitions_through_a_rebalance(
    kafka: KafkaSettings, topics: Topics, processes: Callable[..., GatekeeperProcess]
) -> None:
    a = processes(kafka, "a", AGUI_BUSY_POLICY="enqueue")
    b = processes(kafka, "b", AGUI_BUSY_POLICY="enqueue")
    sent: list[RunRequest] = []

    async def send_and_settle(n: int) -> None:
        sent.extend(wave(n))
        await topics.requests(wave(n))
        await topics.until(
            lambda: final_decisions(topics) >= len(sent), within=60, what=f"wave {n} decided"
        )

    a.start()
    await a.ready()
    async with EchoWorker(topics):
        await send_and_settle(0)
        b.start()
        sent.extend(wave(1))
        await topics.requests(wave(1))  # in flight while B joins
        await b.ready()
        await topics.until(lambda: len(a.assignments()) == 2, within=30, what="A reassigned")
        await topics.until(
            lambda: final_decisions(topics) >= len(sent), within=60, what="wave 1 decided"
        )
        shared = (a.assignments()[-1], b.assignments()[-1])
        sent.extend(wave(2))
        await topics.requests(wave(2))  # in flight while A leaves
        assert a.terminate() == 0, a.tail()
        await topics.until(
            lambda: final_decisions(topics) >= len(sent) and len(topics.dispatches) >= len(sent),
            within=60,
            what="wave 2 decided and dispatched",
        )
        await asyncio.sleep(1)
    check_exactly_once(topics, sent)
    assert {ds[-1].verdict for ds in topics.decisions.values()} == {"admitted"}
    order: dict[str, list[str]] = defaultdict(list)
    for dispatch in topics.dispatches:
        order[dispatch.input.thread_id].append(dispatch.input.run_id)
    expected = [f"r{n}-{k}" for n in range(WAVES) for k in range(PER_WAVE)]
    assert all(runs == expected for runs in order.values())

    owned_a = [_partitions(m) for m in shared[:1]]
    owned_b = [_partitions(m) for m in shared[1:]]
    assert _partitions(a.assignments()[0]) == {0, 1, 2, 3}
    assert len(owned_a[0]) == 2
    assert owned_a[0] | owned_b[0] == {0, 1, 2, 3}
    assert owned_a[0] & owned_b[0] == set()
    assert _partitions(b.assignments()[-1]) == {0, 1, 2, 3}
    assert b.terminate() == 0


def _partitions(message: str) -> set[int]:
    """The partition numbers in an 'assigned partitions [0, 1]: ...' log line."""
    inside = message.split("[", 1)[1].split("]", 1)[0]
    return {int(p) for p in inside.split(",") if p.strip()}
