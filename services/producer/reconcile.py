"""What closing a lost run must write, from what ``events`` and ``runs`` hold of it — pure.

A run's end is on ``runs`` if and only if it is on ``events`` (``publish``
says why the order of a run's end makes this hold while its worker lives).
When a worker dies with a run open, the worker that takes the partition over
(``recovery``) reads what both topics hold of the run and ``reconcile``
says what to write so that both carry the same end:

- the end on both: nothing (``found_closed``);
- the end on ``runs`` only (the worker died between writing it there and on
  ``events``): every record of the run on ``runs`` that ``events`` lacks —
  the end, and its ``RUN_STARTED`` if that never reached ``events`` — is
  copied to ``events`` (``completed``);
- the end on ``events`` only (written by a worker of an earlier version,
  which knew no ``runs``): the end is copied to ``runs`` (``found_closed``);
- no end anywhere: a ``RUN_ERROR`` ``worker_lost``, numbered after the last
  record either topic holds, preceded by a ``RUN_STARTED`` when neither
  holds anything of the run, is written to ``runs`` first, then to
  ``events`` with whatever ``runs`` had that ``events`` lacks
  (``worker_lost``).

Copies are the records as found (bytes and headers), so both topics carry
the same end. A closing interrupted and done again reads a state this same
table covers: writing is in the order the table's rows imply (``runs``,
then ``events``). No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from contracts.topics import TERMINAL_TYPES

Action = Literal["found_closed", "completed", "worker_lost"]


@dataclass(frozen=True, slots=True)
class Found:
    """One record of the run as it was read: its sequence number, type, bytes, headers."""

    seq: int
    event_type: str
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def terminal(self) -> bool:
        return self.event_type in TERMINAL_TYPES


@dataclass(slots=True)
class Trace:
    """What one topic holds of one run."""

    last_seq: int = -1
    """The highest sequence number seen (-1: nothing)."""
    kept: dict[int, Found] = field(default_factory=dict)
    """Kept records by sequence number (the first copy of each): on ``runs`` every one,
    on ``events`` only a terminal."""

    def add(self, found: Found, *, keep: bool) -> None:
        self.last_seq = max(self.last_seq, found.seq)
        if keep or found.terminal:
            self.kept.setdefault(found.seq, found)

    @property
    def terminal(self) -> Found | None:
        return next((f for f in self.kept.values() if f.terminal), None)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to write to close one lost run, and in which order: ``to_runs``, then
    ``lost`` (to ``runs``), then ``to_events`` and ``lost`` (to ``events``)."""

    action: Action
    to_runs: tuple[Found, ...] = ()
    """Records found on ``events`` that ``runs`` lacks (written to ``runs``)."""
    to_events: tuple[Found, ...] = ()
    """Records found on ``runs`` that ``events`` lacks (written to ``events``)."""
    lost_from: int | None = None
    """``worker_lost``: the sequence number the new records start at."""
    with_start: bool = False
    """``worker_lost``: the new records open with a ``RUN_STARTED`` (nothing of the run
    was written anywhere)."""
    end: Found | None = None
    """The end found (on either topic), when there was one."""


def reconcile(events: Trace, runs: Trace) -> Plan:
    """What to write so that the run ends on both topics, the same way (the table above)."""
    on_events, on_runs = events.terminal, runs.terminal
    missing = tuple(f for seq, f in sorted(runs.kept.items()) if seq > events.last_seq)
    if on_events is not None and on_runs is not None:
        return Plan("found_closed", end=on_events)
    if on_runs is not None:
        return Plan("completed", to_events=missing, end=on_runs)
    if on_events is not None:
        return Plan("found_closed", to_runs=(on_events,), end=on_events)
    return Plan("worker_lost", to_events=missing,
                lost_from=max(events.last_seq, runs.last_seq) + 1,
                with_start=events.last_seq < 0 and runs.last_seq < 0)
