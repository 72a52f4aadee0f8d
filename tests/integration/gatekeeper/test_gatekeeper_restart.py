"""A gatekeeper SIGKILLed between an interrupt and its resume forgets nothing.

Two threads are interrupted while the gatekeeper runs as a child process,
then it is killed with SIGKILL (no transaction finished, no group left):
one thread's interrupted state was already committed to ``threads`` (it
comes back by restore), the other's interrupt was written just before the
kill (it comes back from ``events``, read again from the committed offset).
After a restart both still refuse a partial resume and admit a full one,
and the run admitted before the kill is not dispatched a second time.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ag_ui.core import Interrupt
from gatekeeper_harness import GatekeeperProcess, Topics, cancelled, resolved, run_request

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_sigkill_between_interrupt_and_resume_still_rejects_a_partial_resume(
    kafka: KafkaSettings, topics: Topics, processes: Callable[..., GatekeeperProcess]
) -> None:
    gatekeeper = processes(kafka)
    gatekeeper.start()
    await gatekeeper.ready()
    for thread in ("t-restored", "t-replayed"):
        d = await topics.decide(run_request(f"{thread}-r1", thread, "r1"))
        assert d.verdict == "admitted"
        await topics.started(thread, "r1")

    await topics.finished(
        "t-restored", "r1", Interrupt(id="a", reason="approve"), Interrupt(id="b", reason="approve")
    )
    await topics.until(
        lambda: (
            topics.threads.get("t-restored") is not None
            and topics.threads["t-restored"].status == "interrupted"
        ),
        what="the interrupted state committed to threads",
    )
    await topics.finished(
        "t-replayed", "r1", Interrupt(id="a", reason="approve"), Interrupt(id="b", reason="approve")
    )
    gatekeeper.kill()

    gatekeeper.start()
    await gatekeeper.ready()
    for thread in ("t-restored", "t-replayed"):
        partial = await topics.decide(
            run_request(f"{thread}-partial", thread, "r2", resume=resolved("a"))
        )
        assert (partial.verdict, partial.code, partial.interrupt_ids) == (
            "rejected",
            "uncovered_interrupts",
            ["b"],
        ), partial.message
        full = await topics.decide(
            run_request(f"{thread}-full", thread, "r3", resume=[*resolved("a"), *cancelled("b")])
        )
        assert full.verdict == "admitted", full.message
        assert len(topics.dispatched(thread, "r1")) == 1
        assert len(topics.dispatched(thread, "r3")) == 1
    assert all(len(ds) == 1 for ds in topics.decisions.values())
    assert gatekeeper.terminate() == 0
