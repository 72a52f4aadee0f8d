"""A gatekeeper with a static identity (``AGUI_GATEKEEPER_INSTANCE_ID``) restarts at once.

Without one, a SIGKILLed gatekeeper's restart waits until the group gives up
on the dead member (its session) before anyone owns the partitions: seconds
with no decision. With one (KIP-345), the restart takes the dead process's
place in the group as soon as it joins. The session here is 60 s, longer
than the test waits for the restart to be assigned, so an assignment can only
come from the static identity; the restarted gatekeeper still decides from
exactly what was committed (on-disk store on), and a graceful stop leaves the
group at once, so partitions move on without waiting out the session either.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from ag_ui.core import Interrupt
from gatekeeper_harness import GatekeeperProcess, Topics, cancelled, resolved, run_request

from services.kafka.groups import membership
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

SESSION_MS = "60000"


async def group_members(kafka: KafkaSettings) -> tuple[str, int]:
    return await membership(kafka, f"{kafka.topic_prefix}.gatekeeper")


async def test_a_static_gatekeeper_sigkilled_is_replaced_by_its_restart_within_the_session(
    kafka: KafkaSettings, topics: Topics, processes: Callable[..., GatekeeperProcess],
    tmp_path: Path,
) -> None:
    gatekeeper = processes(kafka, AGUI_GATEKEEPER_INSTANCE_ID="gatekeeper-0",
                           AGUI_GATEKEEPER_SESSION_TIMEOUT_MS=SESSION_MS,
                           AGUI_STATE_DIR=str(tmp_path / "state"))
    gatekeeper.start()
    await gatekeeper.ready()
    d = await topics.decide(run_request("t-r1", "t", "r1"))
    assert d.verdict == "admitted", d.message
    await topics.started("t", "r1")
    await topics.finished("t", "r1", Interrupt(id="a", reason="approve"),
                          Interrupt(id="b", reason="approve"))
    gatekeeper.kill()

    gatekeeper.start()
    await gatekeeper.ready(within=40.0)  # a dynamic member would wait 60 s for the dead one
    assert await group_members(kafka) == ("Stable", 1)
    partial = await topics.decide(run_request("t-partial", "t", "r2", resume=resolved("a")))
    assert (partial.verdict, partial.code, partial.interrupt_ids) == (
        "rejected", "uncovered_interrupts", ["b"]), partial.message
    full = await topics.decide(
        run_request("t-full", "t", "r3", resume=[*resolved("a"), *cancelled("b")]))
    assert full.verdict == "admitted", full.message
    assert len(topics.dispatched("t", "r1")) == 1
    assert all(len(ds) == 1 for ds in topics.decisions.values())

    assert gatekeeper.terminate() == 0
    assert await group_members(kafka) == ("Empty", 0)  # left: nothing waits out the session
