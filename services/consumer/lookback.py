"""How far back on ``events`` a run's records can begin — pure, no clock read.

Finding a run's records without an index entry (``replay``) means reading its
thread's partition; from the beginning, that is up to a retention's worth of
every thread on the partition, for one request. A run cannot have begun
before its request was decided, though, and the thread remembers its last
decisions with their times (``ThreadState.recent_decisions``), the start of
its current run (``run_started_at``), and this instance remembers when it read
the admissions it routed (``FanOut.admitted``). Any of these bounds the read
to what was written since, less ``CLOCK_SKEW_S``: the records carry the
worker's clock, the decisions the gatekeeper's. What none of them bounds (a
run older than its thread's memory, or a runId that never ran) is read from
the partition's beginning, and ``FullScans`` caps how many such reads an
instance runs at once.
"""

from __future__ import annotations

from contracts import ThreadState
from services.consumer.problems import RetryLater

CLOCK_SKEW_S = 60.0
"""How far a worker's clock (its records' timestamps) may be behind this host's or the
gatekeeper's."""

BUSY_RETRY_AFTER_S = 5
"""``Retry-After`` of a replay refused while every full scan is taken."""


class FullScans:
    """How many scans from a partition's beginning may run at once on the instance."""

    def __init__(self, limit: int) -> None:
        self.free = limit

    def take(self) -> None:
        """One slot, or ``503 replay_busy`` when none is free."""
        if self.free <= 0:
            raise RetryLater("replay_busy", "as many replays of runs this instance cannot "
                             "place as it serves at once are reading the log; ask again "
                             "later", BUSY_RETRY_AFTER_S)
        self.free -= 1

    def give(self) -> None:
        self.free += 1


def admitted_ms(state: ThreadState | None, run_id: str, routed_ms: int | None) -> int | None:
    """The earliest time (epoch ms) the run is known to have been admitted or started:
    a decision the thread remembers admitting or queueing it, its start if it is the
    thread's current run, or ``routed_ms`` (when this instance read its admission);
    None when none of them knows the run."""
    known = [] if routed_ms is None else [routed_ms]
    if state is not None:
        known += [int(d.decided_at.timestamp() * 1000) for d in state.recent_decisions
                  if d.run_id == run_id and d.verdict != "rejected"]
        if state.run_id == run_id and state.run_started_at is not None:
            known.append(int(state.run_started_at.timestamp() * 1000))
    return min(known) if known else None


def since_ms(earliest_s: float) -> int:
    """Where a read by record time starts (epoch ms) for a run that began no earlier than
    ``earliest_s`` (epoch seconds) by another host's clock."""
    return int((earliest_s - CLOCK_SKEW_S) * 1000)
