"""Is a partition stuck? Input waiting, and its committed offsets not moving.

A partition that cannot commit (a transaction failing on every retry, a
takeover that never ends) decides nothing for every thread on it while the
instance still looks healthy: it is in its group and owns its partitions.
So readiness also asks, for every owned partition, whether it has input (a
lag: records past its committed offsets; or records it holds) while its
committed offsets have not moved for ``AGUI_GATEKEEPER_STALL_S``. The clock
starts when input is first seen after the offsets last moved (an idle
partition whose last commit is old is not stalled the moment a record
arrives), and stops whenever the offsets move or the input is gone.

Pure: the processor reports what it sees with a monotonic time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Offsets = tuple[int, int]
"""The committed next offsets of ``requests`` p and ``events`` p."""


@dataclass(frozen=True, slots=True)
class Seen:
    """One partition as last observed."""

    offsets: Offsets
    waiting: bool
    """True when it had input."""


STEP_S = 0.5
"""How often partitions are observed (each observation reads two positions per partition)."""


@dataclass(slots=True)
class StallWatch:
    """The stall rule over the partitions an instance owns."""

    stall_s: float
    _seen: dict[int, Seen] = field(default_factory=dict)
    _since: dict[int, float] = field(default_factory=dict)
    """When each partition last moved its offsets or had no input."""
    _observed: float = float("-inf")

    def due(self, now: float) -> bool:
        """True when the partitions should be observed again (every ``STEP_S``)."""
        return now - self._observed >= STEP_S

    def observe(self, partitions: Mapping[int, Seen], now: float) -> list[int]:
        """What every owned partition looks like at ``now`` (others are forgotten).

        Returns the partitions that have just become stalled (to log once).
        """
        before = set(self.stalled(self._observed))
        self._observed = now
        for p in list(self._seen):
            if p not in partitions:
                del self._seen[p]
                del self._since[p]
        for p, seen in partitions.items():
            last = self._seen.get(p)
            if last is None or not (seen.waiting and last.waiting) or seen.offsets != last.offsets:
                self._since[p] = now
            self._seen[p] = seen
        return sorted(set(self.stalled(now)) - before)

    def stalled(self, now: float) -> dict[int, float]:
        """Partition → seconds without progress, for each stalled one."""
        return {
            p: now - self._since[p]
            for p, seen in self._seen.items()
            if seen.waiting and now - self._since[p] >= self.stall_s
        }
