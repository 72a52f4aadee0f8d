"""The consumer service's agent directory on the real broker: lookups by name, bounded.

A flood of made-up agent names costs at most ``LOOKUPS_PER_S`` lookups a
second, each name at most one a second; within a flooded second even a real
agent's topic is not asked about (a 404 the client may retry), and the next
second it is found. The readiness probe asks for the required topics by
name. A directory whose broker could not be reached when it started finds
its agents once the broker is back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from types import SimpleNamespace

import pytest

from services.consumer import agents as agents_module
from services.consumer.agents import LOOKUPS_PER_S, MISS_RETRY_S, AgentDirectory, LookupDeferred
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                         partitions=1)


@pytest.fixture
async def directory(kafka: KafkaSettings) -> AsyncIterator[AgentDirectory]:
    await ensure_topics(kafka, ("known",))
    d = AgentDirectory(kafka, (), refresh_s=3600)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The names each lookup asked the broker about."""
    calls: list[list[str]] = []
    real = agents_module.existing

    async def spy(client: object, topics: Iterable[str]) -> frozenset[str]:
        names = list(topics)
        calls.append(names)
        return await real(client, names)  # type: ignore[arg-type]

    monkeypatch.setattr(agents_module, "existing", spy)
    return calls


async def _answer(directory: AgentDirectory, name: str) -> bool | str:
    try:
        return await directory.knows(name)
    except LookupDeferred:
        return "deferred"


async def test_a_flood_of_made_up_names_is_bounded(
        kafka: KafkaSettings, directory: AgentDirectory, asked: list[list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_000.0]  # the directory's clock, stopped: creating a topic may take seconds
    monkeypatch.setattr(agents_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    assert await directory.knows("known")  # listed at start: nothing asked
    assert asked == []
    flood = [f"made-up-{i}" for i in range(LOOKUPS_PER_S + 30)]
    assert [await _answer(directory, name) for name in flood] == (
        [False] * LOOKUPS_PER_S + ["deferred"] * 30)  # past the budget: ask again, not 404
    assert len(asked) == LOOKUPS_PER_S
    assert not await directory.knows(flood[0])  # remembered as missing: not asked again
    assert len(asked) == LOOKUPS_PER_S

    await ensure_topics(kafka, ("late",))
    assert await _answer(directory, "late") == "deferred"  # this second's lookups are spent
    now[0] += max(1.0, MISS_RETRY_S)
    assert await directory.knows("late")
    assert asked[-1] == [kafka.topics.dispatch("late")]


async def test_readiness_asks_for_the_required_topics_by_name(
        kafka: KafkaSettings, directory: AgentDirectory, asked: list[list[str]]) -> None:
    assert await directory.missing_topics() == []
    assert sorted(asked[-1]) == sorted([kafka.topics.requests, kafka.topics.decisions,
                                        kafka.topics.events, kafka.topics.threads,
                                        kafka.topics.control])
    other = AgentDirectory(kafka.with_prefix(kafka.topic_prefix + "x"), (), refresh_s=3600)
    await other.start()
    try:
        assert len(await other.missing_topics()) == 5
    finally:
        await other.stop()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65_536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def test_the_agent_directory_recovers_from_a_broker_it_could_not_reach_at_start(
        kafka: KafkaSettings) -> None:
    """The broker unreachable when the directory starts (its admin client cannot
    bootstrap), reachable again later: the agent is found, not deferred for ever."""
    await ensure_topics(kafka, ("known",))
    host, port = kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    holder = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    proxy_port = holder.sockets[0].getsockname()[1]
    holder.close()  # a closed port: the broker unreachable, for now
    await holder.wait_closed()
    through = KafkaSettings(bootstrap_servers=f"127.0.0.1:{proxy_port}",
                            topic_prefix=kafka.topic_prefix, partitions=1)
    directory = AgentDirectory(through, (), refresh_s=0.5)
    await directory.start()
    assert await _answer(directory, "known") == "deferred"

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection(host, int(port))
        await asyncio.gather(_pipe(client_r, broker_w), _pipe(broker_r, client_w))

    server = await asyncio.start_server(relay, "127.0.0.1", proxy_port)  # the broker is back
    answers: list[bool | str] = []
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10.0):
                while True not in answers:
                    answers.append(await _answer(directory, "known"))
                    await asyncio.sleep(0.5)
        assert answers[-1] is True, (
            f"the broker is reachable again and the directory still answers {answers}")
        assert await directory.missing_topics() == []  # /readyz: the broker answers again
    finally:
        await directory.stop()
        server.close()
