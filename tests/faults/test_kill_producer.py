"""SIGKILL a producer worker mid-run, three times, with a second worker beside it.

Runs take a few hundred milliseconds (the ``scripted`` agent waits before it
ends with an interrupt), and a third of the flows approve a side effect
through the ``approval`` agent, so kills land in the middle of runs and of
approved executions. The worker taking over must close every run the dead
one left open (RUN_ERROR ``worker_lost``) so no thread stays running, never
run again a run whose terminal event was written, and never repeat an
approved side effect.
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


async def test_producer_worker_sigkill_under_load(
    kafka_bootstrap: str, tmp_path: Path, summary: Callable[[str], None]
) -> None:
    config = StackConfig(gatekeepers=1, producers=2, consumers=0)
    async with Stack(kafka_bootstrap, unique_prefix("pw"), tmp_path, config) as stack:
        async with Follower(stack.settings) as follower, KafkaLoad(
                stack.settings, follower, resend_s=8.0, delay_ms=400,
                execution_delay_ms=300) as load:
            faults = Faults(stack, "producer", reps=3, down_s=0.5, interval_s=5.0)
            stats, _ = await asyncio.gather(
                load.run(flows=250, concurrency=16, duration_s=150, until=faults.done),
                faults.run())
        report = await verify(
            stack, summary, "producer worker SIGKILL",
            f"{len(faults.kills)} kills of {', '.join(k.name for k in faults.kills)}, served "
            f"end to end again {faults.recovery()} after each; "
            f"approvals admitted {stats.approvals_admitted}; {stats.line()}")
        assert report.counts["executions"] <= stats.approvals_admitted
        assert stats.gave_up == 0, stats.line()
