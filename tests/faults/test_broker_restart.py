"""Stop the Kafka broker under load and start it again: the services recover unaided.

The scenario runs its own broker (the session broker is shared by every
other test), stops it in the middle of a load of interrupt → resume flows,
leaves it down for a few seconds, and starts it again on the same ports and
data. No service is restarted: each must reconnect by itself and, within
60 s of the broker's return, serve a new run end to end. The checker then
proves nothing was lost or doubled across the outage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from faults.follower import Follower
from faults.harness import Stack, StackConfig, unique_prefix
from faults.load import KafkaLoad
from faults.outages import OwnBroker
from faults.scenario import verify

pytestmark = pytest.mark.faults

DOWN_S = 5.0
RECOVERY_LIMIT_S = 60.0


async def test_broker_stopped_and_restarted_under_load(
    own_broker: OwnBroker, tmp_path: Path, summary: Callable[[str], None]
) -> None:
    config = StackConfig(gatekeepers=1, producers=1, consumers=1)
    async with Stack(own_broker.bootstrap, unique_prefix("br"), tmp_path, config) as stack:
        outage: dict[str, float] = {}
        done = asyncio.Event()

        async def bounce() -> None:
            try:
                await outage_and_return()
            finally:
                done.set()

        async def outage_and_return() -> None:
            await asyncio.sleep(3.0)
            outage["stopped_at"] = time.monotonic()
            await own_broker.stop()
            await asyncio.sleep(DOWN_S)
            broker = await own_broker.start_again()
            outage["up_at"] = time.monotonic()
            outage["broker_start_s"] = broker.started_in
            outage["recovered_s"] = await stack.probe(RECOVERY_LIMIT_S)

        async with Follower(stack.settings) as follower, KafkaLoad(
                stack.settings, follower, resend_s=8.0, step_s=120.0, delay_ms=50) as load:
            stats, _ = await asyncio.gather(
                load.run(flows=250, concurrency=20, duration_s=150, until=done), bounce())
        stack.check_alive()  # unaided: nothing was restarted
        await verify(
            stack, summary, "broker stop/restart",
            f"down {outage['up_at'] - outage['stopped_at']:.1f} s (broker start "
            f"{outage['broker_start_s']:.1f} s), a new run served end to end "
            f"{outage['recovered_s']:.1f} s after the broker was back; {stats.line()}",
            settle_s=90.0, broker_log=own_broker.broker.log_path)
        assert stats.gave_up == 0, stats.line()
