"""Fixtures for the gatekeeper's integration tests on the real broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gatekeeper_harness import GatekeeperProcess, Topics, settings_for

from services.gatekeeper.processor import Processor
from services.gatekeeper.settings import GatekeeperSettings
from services.runtime.settings import KafkaSettings


@pytest.fixture
def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    """Settings for this test's topics (4 partitions, a unique prefix)."""
    return settings_for(kafka_bootstrap, topic_prefix)


@pytest.fixture
async def topics(kafka: KafkaSettings) -> AsyncIterator[Topics]:
    """The topics created, a writer, and an independent read_committed reader."""
    async with Topics(kafka) as t:
        yield t


@pytest.fixture
async def in_process() -> AsyncIterator[Callable[..., Any]]:
    """Start gatekeepers inside the test's event loop; all are stopped afterwards."""
    running: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def start(kafka: KafkaSettings, **env: Any) -> Processor:
        processor = Processor(kafka, GatekeeperSettings(**env))
        stop = asyncio.Event()
        task = asyncio.create_task(processor.run(stop))
        running.append((stop, task))
        done, _ = await asyncio.wait(
            [task, asyncio.create_task(processor.assigned.wait())],
            timeout=30,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if task in done:
            task.result()  # raises what stopped it
        assert processor.assigned.is_set(), "the gatekeeper got no partitions in 30 s"
        return processor

    try:
        yield start
    finally:
        for stop, _ in running:
            stop.set()
        for _, task in running:
            await asyncio.wait_for(task, 30)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., GatekeeperProcess]]:
    """Spawn ``python -m services.gatekeeper`` children; every one is killed afterwards."""
    spawned: list[GatekeeperProcess] = []

    def spawn(kafka: KafkaSettings, name: str = "gk", **env: str) -> GatekeeperProcess:
        process = GatekeeperProcess(kafka, tmp_path, name, env)
        spawned.append(process)
        return process

    try:
        yield spawn
    finally:
        for process in spawned:
            process.cleanup()
