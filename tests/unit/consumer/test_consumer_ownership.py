"""Partition ownership: the assignor's plan, the map it tells every member, and routing."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from services.consumer.ownership import Ownership, Route, route
from services.kafka.assignor import (
    OwnersAssignor,
    decode_owners,
    encode_owners,
    owners_of,
    plan,
)


@pytest.mark.parametrize(("members", "partitions"),
                         [(m, p) for m in range(1, 6) for p in range(0, 13)])
def test_the_plan_gives_each_partition_to_exactly_one_member_in_even_ranges(
        members: int, partitions: int) -> None:
    urls = {f"m{i}": f"http://h{i}:8000" for i in range(members)}
    owned = plan(urls, partitions)
    assert set(owned) == set(urls)
    every = sorted(p for parts in owned.values() for p in parts)
    assert every == list(range(partitions))
    sizes = [len(v) for v in owned.values()]
    assert max(sizes) - min(sizes) <= 1
    for parts in owned.values():
        assert parts == list(range(parts[0], parts[0] + len(parts))) if parts else True


def test_the_plan_depends_on_the_urls_not_on_member_ids_or_their_order() -> None:
    urls = ["http://a:1", "http://b:1", "http://c:1"]
    plans = []
    for ids in itertools.permutations(["x", "y", "z"]):
        members = dict(zip(ids, urls, strict=True))
        owned = plan(members, 8)
        plans.append({members[m]: parts for m, parts in owned.items()})
    assert all(p == plans[0] for p in plans)
    assert plans[0]["http://a:1"] == [0, 1, 2]


def test_the_map_round_trips_and_names_nobody_for_an_unowned_partition() -> None:
    members = {"m1": "http://a:1", "m2": "http://b:1"}
    owners = owners_of(members, {"m1": [0, 2], "m2": [1]}, 4)
    assert owners == ["http://a:1", "http://b:1", "http://a:1", ""]
    assert decode_owners(encode_owners(owners)) == tuple(owners)
    assert decode_owners(b"") is None
    assert decode_owners(b"not json") is None
    assert decode_owners(b'{"urls": ["x"], "owners": [3]}') is None


class _Cluster:
    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.counts.get(topic)
        return None if n is None else set(range(n))


def test_the_assignor_gives_the_same_partition_of_every_topic_to_one_member_and_tells_all(
        ) -> None:
    told: list[tuple[str, ...]] = []
    assignor = OwnersAssignor("http://a:1", told.append)
    meta = assignor.metadata(["t.events", "t.decisions"])
    assert meta.user_data == b"http://a:1"
    members = {"m-a": meta,
               "m-b": ConsumerProtocolMemberMetadata(1, ["t.decisions", "t.events"],
                                                     b"http://b:1")}
    out = assignor.assign(_Cluster({"t.events": 4, "t.decisions": 4}), members)
    a = dict(out["m-a"].assignment)
    b = dict(out["m-b"].assignment)
    assert a == {"t.decisions": [0, 1], "t.events": [0, 1]}
    assert b == {"t.decisions": [2, 3], "t.events": [2, 3]}
    assert out["m-a"].user_data == out["m-b"].user_data
    assignor.on_assignment(out["m-b"])
    assert told == [("http://a:1", "http://a:1", "http://b:1", "http://b:1")]


@pytest.mark.parametrize("forwarded", [False, True])
def test_routing_serves_what_is_mine_forwards_the_rest_once_and_never_to_nobody(
        forwarded: bool) -> None:
    owners = ("http://a:1", "http://b:1", "")
    mine = frozenset({0})
    assert route(0, mine, owners, forwarded=forwarded) == Route(True)
    assert route(2, mine, owners, forwarded=forwarded) == Route(False)
    assert route(7, mine, owners, forwarded=forwarded) == Route(False)
    expected = Route(False) if forwarded else Route(False, "http://b:1")
    assert route(1, mine, owners, forwarded=forwarded) == expected


def test_routing_by_my_assignment_not_by_my_url() -> None:
    """Two instances that could not tell their URL both advertise "": each serves only
    what it was given, never what the map names "" for."""
    owners = ("", "")
    assert route(0, frozenset({0}), owners, forwarded=False) == Route(True)
    assert route(1, frozenset({0}), owners, forwarded=False) == Route(False)


async def test_ownership_settles_and_moves_on_with_each_assignment() -> None:
    ownership = Ownership("http://a:1")
    assert not await ownership.wait_settled(0.01)
    assert not await ownership.moved_on(0, 0.01)
    waiter = asyncio.create_task(ownership.moved_on(0, 5))
    await asyncio.sleep(0)
    ownership.update([0, 1], ("http://a:1", "http://a:1"))
    assert await waiter
    assert await ownership.wait_settled(0.01)
    assert ownership.route(1, forwarded=False).local
    ownership.unsettle()
    assert not await ownership.wait_settled(0.01)
    assert not await ownership.moved_on(1, 0.01)
    ownership.update([1], ("http://b:1", "http://a:1"))
    assert ownership.generation == 2
    assert await ownership.moved_on(1, 0.01)
    assert ownership.route(0, forwarded=False) == Route(False, "http://b:1")
