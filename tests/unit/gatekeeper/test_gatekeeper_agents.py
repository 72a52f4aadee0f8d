"""``requested_agents``: the agents a poll's requests name that the gatekeeper does not know.

They are looked up before those requests are decided, so the first request
for an agent deployed after the gatekeeper started is not refused as
unknown. The header names the agent when there is one; otherwise the value
is read; what cannot be read names nothing (intake refuses it).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace

import orjson
import pytest
from gatekeeper_builders import request

from contracts import TopicCatalog, encode
from contracts.headers import AGENT
from services.gatekeeper import agents as agents_module
from services.gatekeeper.agents import MISS_RETRY_S, Agents, requested_agents
from services.kafka.clients import ConsumerRecord, KafkaError, TopicPartition
from services.kafka.lookup import MAX_NAMES

pytestmark = pytest.mark.unit

REQUESTS = "p.requests"
KNOWN = frozenset({"scripted"})
MAX = 10_000


def record(value: bytes | None, headers: list[tuple[str, bytes]] | None = None,
           topic: str = REQUESTS) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic, 0, 0, 0, 0, b"t", value, None, 1, len(value or b""),
                          headers or [])


def named(*records: ConsumerRecord[bytes, bytes]) -> set[str]:
    polled: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
    for r in records:
        polled.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
    return requested_agents(polled, REQUESTS, KNOWN, MAX)


def test_an_unknown_agent_in_the_value_is_named_and_a_known_one_is_not() -> None:
    assert named(record(encode(request(agent="late"))),
                 record(encode(request(agent="scripted")))) == {"late"}


def test_the_header_names_the_agent_without_reading_the_value() -> None:
    assert named(record(b"not json at all", [(AGENT, b"late")])) == {"late"}
    assert named(record(encode(request(agent="other")), [(AGENT, b"scripted")])) == set()


@pytest.mark.parametrize("value", [
    None,
    b"",
    b"{not json",
    b"[1, 2]",
    b'{"agent": 7}',
    b'{"input": {"agent": "nested"}}',
    orjson.dumps({"agent": "huge", "pad": "x" * MAX}),
])
def test_what_cannot_be_read_or_names_no_agent_names_nothing(value: bytes | None) -> None:
    assert named(record(value)) == set()


def test_records_of_other_topics_are_not_requests() -> None:
    assert named(record(encode(request(agent="late")), topic="p.runs")) == set()


def test_each_name_is_named_once() -> None:
    assert named(*(record(encode(request(request_id=f"q{i}", agent="late")))
                   for i in range(5))) == {"late"}


class Broker:
    """Stands in for the lookup's answer, recording what each lookup asked."""

    def __init__(self, topics: set[str], fail: bool = False) -> None:
        self.topics, self.fail = topics, fail
        self.asked: list[list[str]] = []

    async def existing(self, _client: object, names: Iterable[str]) -> frozenset[str]:
        asked = list(names)
        self.asked.append(asked)
        if self.fail:
            raise KafkaError("no answer")
        return frozenset(n for n in asked if n in self.topics)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(agents_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(agents_module, "client_of", lambda consumer: consumer)
    return now


def agents_with(monkeypatch: pytest.MonkeyPatch, broker: Broker) -> Agents:
    monkeypatch.setattr(agents_module, "existing", broker.existing)
    return Agents(TopicCatalog("p"), every_s=60)


async def test_a_flood_of_names_asks_one_request_s_worth_a_poll(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    broker = Broker({"p.dispatch.late"})
    agents = agents_with(monkeypatch, broker)
    flood = [f"made-up-{i}" for i in range(2 * MAX_NAMES)]
    await agents.learn(None, flood)  # type: ignore[arg-type]
    assert [len(a) for a in broker.asked] == [MAX_NAMES]
    await agents.learn(None, [*flood[:MAX_NAMES], "late"])  # type: ignore[arg-type]
    assert broker.asked[-1] == ["p.dispatch.late"]  # the missing ones are remembered
    assert "late" in agents.names
    clock[0] += MISS_RETRY_S
    await agents.learn(None, flood[:1])  # type: ignore[arg-type]
    assert broker.asked[-1] == ["p.dispatch.made-up-0"]  # asked again a second later


async def test_after_a_failed_lookup_nothing_is_asked_for_a_second(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    broker = Broker(set(), fail=True)
    agents = agents_with(monkeypatch, broker)
    await agents.learn(None, ["a"])  # type: ignore[arg-type]
    await agents.learn(None, ["b"])  # type: ignore[arg-type]
    assert broker.asked == [["p.dispatch.a"]]
    clock[0] += MISS_RETRY_S
    broker.fail = False
    await agents.learn(None, ["b"])  # type: ignore[arg-type]
    assert broker.asked[-1] == ["p.dispatch.b"]
