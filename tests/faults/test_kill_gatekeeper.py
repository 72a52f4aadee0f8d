"""SIGKILL the gatekeeper under load, three times, and restart it each time.

Requests keep arriving straight on ``requests`` while the only gatekeeper
dies without warning; a request not decided within a few seconds is sent
again with the same requestId (as a client retrying would). The restarted
gatekeeper restores its threads from the compacted changelog, aborts what
the dead one left open, and must decide every request exactly once, never
dispatch a run twice, and leave no thread running. The gatekeeper keeps its
threads in an on-disk store (``AGUI_STATE_DIR``), so each restart reads only
the changelog records its store had not installed when it died.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from faults.follower import Follower
from faults.harness import Stack, StackConfig, unique_prefix
from faults.load import KafkaLoad
from faults.scenario import Faults, verify

pytestmark = pytest.mark.faults


async def test_gatekeeper_sigkill_under_load(
    kafka_bootstrap: str, tmp_path: Path, summary: Callable[[str], None]
) -> None:
    config = StackConfig(gatekeepers=1, producers=1, consumers=0,
                         role_env={"gatekeeper": {"AGUI_STATE_DIR": str(tmp_path / "state")}})
    async with Stack(kafka_bootstrap, unique_prefix("gk"), tmp_path, config) as stack:
        async with Follower(stack.settings) as follower, KafkaLoad(
                stack.settings, follower, resend_s=4.0, delay_ms=50) as load:
            faults = Faults(stack, "gatekeeper", reps=3, down_s=0.3)
            stats, _ = await asyncio.gather(
                load.run(flows=250, concurrency=16, duration_s=150, until=faults.done),
                faults.run())
        await verify(stack, summary, "gatekeeper SIGKILL",
                     f"{len(faults.kills)} kills, served end to end again {faults.recovery()} "
                     f"after each kill; {stats.line()}")
        assert stats.gave_up == 0, stats.line()
