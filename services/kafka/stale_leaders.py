"""An offset lookup refused by a former leader: learn the new one instead of asking it again.

A reader that seeks (``seek_to_beginning``, ``seek_to_end``, a position out
of range) has aiokafka's fetcher ask the partition's leader, as its cached
metadata names it, for the offset (ListOffsets). When leadership has moved
since that metadata was read (a node killed and started again as a
follower, or paused past its session), the former leader answers
``NOT_LEADER_OR_FOLLOWER``, and aiokafka 0.14's fetcher only waits and asks
the same node again: nothing refreshes the metadata until its periodic
refresh (``metadata_max_age_ms``, five minutes). Every reader that started
or seeked meanwhile stood still for up to five minutes: a service restoring
its state, a stream continuing from the log, the load generator's follower
in the cluster suite (which is how this was found). aiokafka's own
``beginning_offsets``/``end_offsets`` and its fetches already refresh on
such errors; the Java client does for offset lookups too (KAFKA-9535,
KAFKA-9159).

``install`` (called by ``clients``) wraps the fetcher's offset lookup so
that a retriable error asks for a metadata refresh before it is raised; the
fetcher's next attempt goes to the leader the refresh names. A refresh is
one Metadata request, shared by every caller asking while it is pending.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.consumer.fetcher import Fetcher
from aiokafka.errors import KafkaError

from services.kafka.wrapping import wrap_once

_OffsetRequest = Callable[[Fetcher, int, Any], Awaitable[Any]]


def _refreshing(lookup: _OffsetRequest) -> _OffsetRequest:
    async def offset_request(self: Fetcher, node_id: int, topic_data: Any) -> Any:
        try:
            return await lookup(self, node_id, topic_data)
        except KafkaError as exc:
            if exc.retriable:
                self._client.force_metadata_update()
            raise

    return offset_request


def install() -> None:
    """Have aiokafka's fetcher refresh metadata when an offset lookup fails retriably."""
    wrap_once(Fetcher, "_proc_offset_request", _refreshing)
