"""A request found on another partition than its thread's: misrouted, never decided.

The gatekeeper holds a thread by its partition number: its state on
``threads`` p, its runs' ends on ``runs`` p, its requests on ``requests`` p,
where p is ``partition_for(threadId, AGUI_PARTITIONS)``. The relay's own
producers place every record so (``services.kafka.partitioning``); a client
writing ``requests`` itself with Kafka's default partitioner hashes among the
topic's current count, and once an operator grew ``requests`` past
``AGUI_PARTITIONS`` some of its threads land on another partition. Decided
there, such a request would meet none of its thread's state and start a
second copy of the thread; it is dead-lettered instead, as ``misrouted``,
with what an operator needs to find the cause. Pure.
"""

from __future__ import annotations

from services.kafka.partitioning import partition_for

MISROUTED = "misrouted"
"""The dead-letter code of a request on a partition other than its thread's."""


def misrouted(thread_id: str, partition: int, partitions: int) -> str | None:
    """Why a request of ``thread_id`` found on ``partition`` cannot be decided there (its
    thread is hashed among ``partitions``), or None when it is where its thread is."""
    expected = partition_for(thread_id, partitions)
    if partition == expected:
        return None
    return (f"the request of thread {thread_id[:200]!r} is on partition {partition}, but "
            f"the thread lives on partition {expected} (its key hashed among "
            f"AGUI_PARTITIONS={partitions}); it was likely written by a client using Kafka's "
            "default partitioner on a requests topic with more partitions than "
            "AGUI_PARTITIONS. Nothing was decided: send it again through the relay's API, "
            f"or write it to partition {expected}")
