"""A request found on another partition than its thread's is dead-lettered, not decided.

Another client writing ``requests`` with Kafka's default partitioner on a
topic grown past AGUI_PARTITIONS puts some threads on a partition whose
gatekeeper holds none of their state: decided there, the request would
start a second copy of the thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from gatekeeper_builders import ENTROPY, NOW, REJECT, request, running

from contracts import encode
from services.gatekeeper.batch import Batch, Limits
from services.gatekeeper.placement import MISROUTED, misrouted
from services.kafka.partitioning import partition_for
from services.kafka.sizing import RecordLimit

pytestmark = pytest.mark.unit

PARTITIONS = 8
THREAD = "t1"
HOME = partition_for(THREAD, PARTITIONS)
ASTRAY = partition_for(THREAD, 12)


@dataclass(frozen=True)
class Rec:
    topic: str
    value: bytes | None
    key: bytes | None = THREAD.encode()
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int = HOME
    offset: int = 42


def batch(partitions: int | None = PARTITIONS) -> Batch:
    limits = Limits(RecordLimit(8192), agents=frozenset({"scripted"}), partitions=partitions)
    return Batch({THREAD: running("r0")}, NOW, REJECT, limits, entropy=ENTROPY)


def test_the_thread_chosen_moves_when_hashed_among_twelve() -> None:
    assert ASTRAY != HOME


def test_a_request_on_its_threads_partition_is_decided() -> None:
    b = batch()
    b.request(Rec("p.requests", encode(request("q1", "r1"))))
    assert [d.request_id for d in b.decisions] == ["q1"]
    assert b.dead_letters == []


def test_a_request_on_another_partition_is_dead_lettered_misrouted_and_changes_nothing() -> None:
    b = batch()
    b.request(Rec("p.requests", encode(request("q1", "r1")), partition=ASTRAY, offset=7))
    assert b.decisions == []
    assert b.states == {}
    [letter] = b.dead_letters
    assert (letter.code, letter.source_topic, letter.partition, letter.offset) == (
        MISROUTED, "p.requests", ASTRAY, 7)
    for named in (f"partition {ASTRAY}", f"partition {HOME}", repr(THREAD),
                  "AGUI_PARTITIONS=8", "default partitioner"):
        assert named in letter.reason, (named, letter.reason)


def test_without_a_partition_count_nothing_is_checked() -> None:
    b = batch(partitions=None)
    b.request(Rec("p.requests", encode(request("q1", "r1")), partition=ASTRAY))
    assert [d.request_id for d in b.decisions] == ["q1"]


def test_misrouted_is_none_where_the_thread_lives() -> None:
    assert misrouted(THREAD, HOME, PARTITIONS) is None
    assert misrouted(THREAD, ASTRAY, PARTITIONS) is not None
