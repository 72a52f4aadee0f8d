"""What an instance holds per owned partition, and what one batch's transaction writes."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson
import pytest
from gatekeeper_builders import ENTROPY, NOW, REJECT, request, running

from contracts import TopicCatalog, encode
from services.gatekeeper.batch import Batch, Limits
from services.gatekeeper.partition import Owned, outputs, transactional_id
from services.gatekeeper.threadstore import ThreadStates
from services.kafka.clients import TopicPartition
from services.kafka.sizing import RecordLimit

pytestmark = pytest.mark.unit

TOPICS = TopicCatalog("p", 4)
REQUESTS = TopicPartition("p.requests", 2)
EVENTS = TopicPartition("p.events", 2)
TRACE = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass(frozen=True)
class Rec:
    offset: int
    value: bytes | None = None
    key: bytes | None = b"t1"
    topic: str = "p.requests"
    partition: int = 2
    headers: list[tuple[str, bytes]] = field(default_factory=list)


def owned(committed_request: int = 10, committed_event: int = 20) -> Owned:
    return Owned(2, REQUESTS, EVENTS, ThreadStates(2), committed_request, committed_event)


def test_a_fresh_partition_reads_from_its_committed_offsets() -> None:
    o = owned()
    assert (o.next_request, o.next_event, o.applied_event) == (10, 20, 20)
    assert o.offsets() == {REQUESTS: 10, EVENTS: 20}
    assert not o.advanced()


def test_held_requests_are_not_committed_past() -> None:
    o = owned()
    o.held = [Rec(12), Rec(13)]
    o.next_request, o.applied_event = 14, 25
    assert o.offsets() == {REQUESTS: 12, EVENTS: 25}
    assert o.advanced()
    o.held = []
    assert o.offsets() == {REQUESTS: 14, EVENTS: 25}


def test_a_commit_installs_states_and_offsets_and_a_rewind_returns_to_them() -> None:
    o = owned()
    batch = Batch(o.states, NOW, REJECT, Limits(RecordLimit(65_536)), entropy=ENTROPY)
    batch.states["t1"] = running("r0")
    o.next_request, o.applied_event = 14, 25
    o.committed(o.offsets(), batch)
    assert o.states["t1"].status == "running"
    assert (o.committed_request, o.committed_event) == (14, 25)
    o.next_request, o.next_event, o.applied_event = 30, 40, 40
    o.held, o.inbox = [Rec(29)], [Rec(39, topic="p.events")]
    epoch = o.epoch
    o.rewound()
    assert (o.next_request, o.next_event, o.applied_event) == (14, 25, 25)
    assert (o.held, o.inbox, o.barrier, o.epoch) == ([], [], None, epoch + 1)
    assert o.states["t1"].status == "running"  # what was committed stays


def test_a_transaction_writes_decision_dispatch_and_state_with_their_keys() -> None:
    batch = Batch({}, NOW, REJECT, Limits(RecordLimit(65_536), agents=frozenset({"scripted"})),
                  entropy=ENTROPY)
    req = request("q1", "r1")
    batch.request(Rec(5, encode(req), headers=[("traceparent", TRACE)]))
    batch.request(Rec(6, b"garbage"))
    records = outputs(TOPICS, 2, batch)
    by_topic = {r.topic: r for r in records}
    assert set(by_topic) == {"p.decisions", "p.dispatch.scripted", "p.deadletter", "p.threads"}
    assert by_topic["p.threads"].partition == 2  # restore reads partition p, whatever the hash
    assert by_topic["p.decisions"].key == by_topic["p.dispatch.scripted"].key == b"t1"
    # the gatekeeper's hop: the request's trace, a span of its own, on both records
    (name, value), = by_topic["p.decisions"].headers or []
    assert by_topic["p.dispatch.scripted"].headers == [(name, value)]
    assert (name, value[:36]) == ("traceparent", TRACE[:36])
    assert value[36:53] != TRACE[36:53]
    assert orjson.loads(by_topic["p.dispatch.scripted"].value)["input"] == orjson.loads(
        encode(req.input)
    )
    assert orjson.loads(by_topic["p.deadletter"].value)["offset"] == 6


def test_the_transactional_id_names_the_owned_partitions() -> None:
    assert transactional_id("agui", [3]) == "agui.gatekeeper.p3"
    assert transactional_id("agui", range(8)) == "agui.gatekeeper.p0-7"
    assert transactional_id("agui", [7, 0, 1, 2, 5, 2]) == "agui.gatekeeper.p0-2,5,7"


def test_different_assignments_have_different_transactional_ids() -> None:
    assignments = [frozenset(p for p in range(6) if mask >> p & 1) for mask in range(1, 64)]
    assert len({transactional_id("agui", a) for a in assignments}) == len(assignments)
