"""The consumer service's group assignor: partitions by plan, and the whole map told to all.

``OwnersAssignor`` is what ``services.consumer.ownership`` chooses (its
docstring says why the group protocol and not a membership topic): each
member's join metadata carries its advertised URL in ``user_data``; the
leader runs ``plan`` and hands every member, in its assignment's
``user_data``, the map ``partition -> url`` (``encode_owners``), as Kafka
Streams' ``StreamsPartitionAssignor`` does with ``partitionsByHost``.

``plan`` is pure: members sorted by (url, member id), partitions split in
contiguous ranges as Kafka's range assignor does, the same p of every topic
to the same member (the topics are co-partitioned). The same set of URLs
always gives the same plan, so an instance restarted at its address gets its
partitions back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

PROTOCOL = "agui-owners"
VERSION = 1


def plan(members: Mapping[str, str], partitions: int) -> dict[str, list[int]]:
    """member id -> the partitions it owns, for members advertising ``members[id]`` (a URL).

    Contiguous ranges in (url, member id) order; with more members than
    partitions the last members own none.
    """
    order = sorted(members, key=lambda m: (members[m], m))
    out: dict[str, list[int]] = {m: [] for m in order}
    if not order or partitions <= 0:
        return out
    each, extra = divmod(partitions, len(order))
    start = 0
    for i, member in enumerate(order):
        size = each + (1 if i < extra else 0)
        out[member] = list(range(start, start + size))
        start += size
    return out


def owners_of(members: Mapping[str, str], owned: Mapping[str, Sequence[int]],
              partitions: int) -> list[str]:
    """The map every member is told: index p is partition p's owner URL ("" none)."""
    out = [""] * partitions
    for member, parts in owned.items():
        for p in parts:
            if 0 <= p < partitions:
                out[p] = members[member]
    return out


def encode_owners(owners: Sequence[str]) -> bytes:
    """The assignment ``user_data``: the URLs once each, and each partition's index."""
    urls = sorted(set(owners))
    index = {u: i for i, u in enumerate(urls)}
    return orjson.dumps({"v": VERSION, "urls": urls, "owners": [index[o] for o in owners]})


def decode_owners(data: bytes | None) -> tuple[str, ...] | None:
    """The map from an assignment's ``user_data``; None when it holds none (another
    assignor's, or an unreadable one)."""
    if not data:
        return None
    try:
        raw = orjson.loads(data)
        urls, owners = raw["urls"], raw["owners"]
        return tuple(str(urls[i]) for i in owners)
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None


class OwnersAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """The group's assignor: ``plan``, with every member told the whole map."""

    name = PROTOCOL
    version = VERSION

    def __init__(self, url: str, told: Callable[[tuple[str, ...]], None]) -> None:
        self.url = url
        self.told = told

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics),
                                              self.url.encode("utf-8"))

    def assign(self, cluster: Any,
               members: Mapping[str, ConsumerProtocolMemberMetadata]
               ) -> dict[str, ConsumerProtocolMemberAssignment]:
        urls = {m: bytes(meta.user_data or b"").decode("utf-8", "replace")
                for m, meta in members.items()}
        topics = sorted({t for meta in members.values() for t in meta.subscription})
        counts = {t: len(cluster.partitions_for_topic(t) or ()) for t in topics}
        width = max(counts.values(), default=0)
        owned = plan(urls, width)
        told = encode_owners(owners_of(urls, owned, width))
        out = {}
        for member, parts in owned.items():
            wanted = set(members[member].subscription)
            assignment = [(t, [p for p in parts if p < counts[t]]) for t in topics if t in wanted]
            out[member] = ConsumerProtocolMemberAssignment(self.version, assignment, told)
        return out

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        owners = decode_owners(assignment.user_data)
        if owners is not None:
            self.told(owners)
