"""What a partition's store must read from its changelog when it is assigned (pure).

The store is trusted only when it can say which changelog offset it
reflects, of which topic, and the topic can account for that offset: the
store's topic id is the topic's now, and the checkpoint lies between the
partition's first offset and its last stable offset. Then only
the records from the checkpoint on are read (a *delta*). Anything else is
rebuilt from the topic's first offset (a *full* restore), and ``reason``
says why, for the log line:

- no store, or files that do not open as one (``missing``: the caller's reason);
- the store's topic id is not the topic's: the topic was deleted and created
  again (its offsets started over, and may have grown past the checkpoint), or
  the store does not say (a restore cut off before its end, or a store of a
  version that did not keep it); a broker that gives no ids leaves this unchecked;
- a checkpoint past the end: the topic was recreated, or the store belongs
  to another cluster;
- a checkpoint before the first offset: the records after it were deleted,
  the log no longer has them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plan:
    """Read ``start`` up to ``end`` (exclusive); wipe the store first when ``full``."""

    full: bool
    start: int
    end: int
    reason: str

    @property
    def expected(self) -> int:
        """At most this many offsets to read (control records and compaction gaps count)."""
        return max(self.end - self.start, 0)


def plan(checkpoint: int | None, missing: str, first: int, end: int,
         stored_topic: str | None = None, topic: str | None = None) -> Plan:
    """The restore of one partition.

    ``checkpoint``: the offset the store reflects (None: no usable store, for
    the reason ``missing``); ``first``: the changelog partition's first
    offset; ``end``: its last stable offset (no transaction open);
    ``stored_topic``: the topic id the store's checkpoint counts offsets of;
    ``topic``: the topic's id now (None: the broker did not say).
    """
    if checkpoint is None:
        return Plan(True, first, end, missing)
    if topic is not None and stored_topic != topic:
        return Plan(True, first, end,
                    f"the store reflects topic id {stored_topic}, the topic's id is {topic} "
                    "(topic deleted and created again)" if stored_topic is not None else
                    "the store does not say which topic its checkpoint counts offsets of "
                    "(a restore cut off, or a store from before topic ids were kept)")
    if checkpoint > end:
        return Plan(True, first, end,
                    f"checkpoint {checkpoint} is past the changelog's end {end} "
                    "(topic recreated, or a store of another cluster)")
    if checkpoint < first:
        return Plan(True, first, end,
                    f"checkpoint {checkpoint} is before the changelog's first offset {first} "
                    "(the records after it are gone)")
    if checkpoint == end:
        return Plan(False, checkpoint, end, "up to date")
    return Plan(False, checkpoint, end, f"{end - checkpoint} offsets after checkpoint {checkpoint}")
