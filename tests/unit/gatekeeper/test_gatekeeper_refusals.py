"""What the processor sets aside when the broker refuses a transaction's records."""

from __future__ import annotations

import pytest

from services.gatekeeper.batch import Poison
from services.gatekeeper.partition import Owned
from services.gatekeeper.refusals import set_aside
from services.gatekeeper.threadstore import ThreadStates
from services.kafka.clients import TopicPartition
from services.kafka.transactions import OutRecord

pytestmark = pytest.mark.unit


def owned(p: int) -> Owned:
    return Owned(p, TopicPartition("p.requests", p), TopicPartition("p.events", p),
                 ThreadStates(p), 10, 20)


def test_each_refused_records_input_is_poisoned_once_on_its_own_partition() -> None:
    parts = {1: owned(1), 2: owned(2)}
    source = ("p.requests", 2, 15)
    refused = [
        OutRecord("p.decisions", b"x" * 100, b"t", source=source),
        OutRecord("p.threads", b"y" * 200, b"t", 2, source=source),
        OutRecord("p.decisions", b"z", b"u", source=("p.events", 9, 1)),  # not owned here
        OutRecord("p.decisions", b"z", b"u"),  # no source
    ]
    assert set_aside(refused, parts) == ["p.requests p2@15"]
    assert parts[1].poison == {}
    [(key, poison)] = parts[2].poison.items()
    assert key == source
    assert poison.level == 1
    assert "p.decisions record of" in poison.reason
    assert "refused by the broker" in poison.reason


def test_an_input_refused_again_is_poisoned_harder() -> None:
    parts = {2: owned(2)}
    source = ("p.events", 2, 21)
    parts[2].poison[source] = Poison("first", 1)
    set_aside([OutRecord("p.deadletter", b"x", source=source)], parts)
    assert parts[2].poison[source] == Poison("first", 2)


def test_poison_below_the_committed_offsets_is_forgotten() -> None:
    o = owned(2)
    o.poison = {("p.requests", 2, 12): Poison("a"), ("p.events", 2, 25): Poison("b")}
    o.committed({o.requests: 13, o.runs: 22}, None)
    assert list(o.poison) == [("p.events", 2, 25)]
