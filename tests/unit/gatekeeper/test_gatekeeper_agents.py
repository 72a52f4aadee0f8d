"""``requested_agents``: the agents a poll's requests name that the gatekeeper does not know.

They are looked up before those requests are decided, so the first request
for an agent deployed after the gatekeeper started is not refused as
unknown. The header names the agent when there is one; otherwise the value
is read; what cannot be read names nothing (intake refuses it).
"""

from __future__ import annotations

import orjson
import pytest
from gatekeeper_builders import request

from contracts import encode
from contracts.headers import AGENT
from services.gatekeeper.agents import requested_agents
from services.kafka.clients import ConsumerRecord, TopicPartition

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
