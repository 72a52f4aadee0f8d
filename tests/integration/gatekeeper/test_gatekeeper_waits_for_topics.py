"""A gatekeeper started before its topics waits for them, saying so once, and stops on request.

Before, its Kafka client logged every failed metadata refresh (two lines
every 100 ms, 890 lines in 40 s), ignored SIGINT meanwhile and gave up with
a traceback. Now it names the missing topics and the command that creates
them, and starts deciding once they exist.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from gatekeeper_harness import GatekeeperProcess, Topics, run_request

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


def waiting_lines(process: GatekeeperProcess) -> list[str]:
    return [str(line["msg"]) for line in process.log_lines()
            if str(line.get("msg", "")).startswith("waiting for topics")]


async def until_logged(process: GatekeeperProcess, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not waiting_lines(process):
        assert time.monotonic() < deadline, process.tail()
        assert process.proc is not None
        assert process.proc.poll() is None, process.tail()
        await asyncio.sleep(0.1)


async def test_it_waits_quietly_then_decides_once_the_topics_exist(
        kafka: KafkaSettings, processes: Callable[..., GatekeeperProcess]) -> None:
    gatekeeper = processes(kafka)
    gatekeeper.start()
    await until_logged(gatekeeper)
    await asyncio.sleep(3)  # what it logs while it waits
    lines = gatekeeper.log_lines()
    assert len(lines) <= 4, gatekeeper.tail()  # start, the warning; no client noise
    [warning] = waiting_lines(gatekeeper)
    assert f"{kafka.topic_prefix}.requests" in warning
    assert "agui-relay topics create" in warning

    async with Topics(kafka) as topics:  # creates them
        await gatekeeper.ready()
        decision = await topics.decide(run_request("q1", "t-wait", "r1"))
        assert decision.verdict == "admitted"
    assert gatekeeper.terminate() == 0


async def test_a_stop_while_waiting_is_a_clean_exit(
        kafka: KafkaSettings, processes: Callable[..., GatekeeperProcess]) -> None:
    gatekeeper = processes(kafka)
    gatekeeper.start()
    await until_logged(gatekeeper)
    assert gatekeeper.terminate(timeout=10) == 0, gatekeeper.tail()  # it waits, and hears
    assert not any(line.get("level") == "error" for line in gatekeeper.log_lines())
