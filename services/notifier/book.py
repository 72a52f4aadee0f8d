"""One owned ``threads`` partition as the notifier keeps it: memory, deadlines, a clock.

A partition is restored before it notifies: its records before the group's
committed offset are applied quietly (``restore``), then ``activate`` sets
the partition's clock to the committed *watermark* and every change after
that is notified (``apply``). The watermark is the instant up to which
expiries have been notified: every open interrupt whose deadline is at or
before it has had its ``expired`` event delivered. The notifier commits it
with each offset (``commit_metadata``), so a restart neither repeats the
expiries it delivered nor misses one that fell due while it was away.

Expiries are a heap of ``(deadline, thread)`` per partition, not a timer
each: a thread with no expiry costs nothing, a million pending expiries cost
a heap. Entries are checked against the thread's memory when they come due
(an interrupt answered in time leaves a stale entry that does nothing) and
the heap is rebuilt when stale entries outnumber live ones.

The clock moves with the records: before a record is applied, everything
due at or before its time (the gatekeeper's ``updatedAt``, the instant its
rules compared expiries against) is notified, so an interrupt answered in
time is never reported expired, however late the notifier reads; when the
partition is read to its end, the wall clock moves it (``advance``). Pure:
instants are arguments.
"""

from __future__ import annotations

import heapq
import re
from datetime import datetime

from contracts import ThreadState
from contracts.webhooks import WebhookEvent
from services.agui.jsdate import from_epoch_ms, to_epoch_ms
from services.notifier.changes import Seen, expire, seen_of, transition

__all__ = ["Book", "commit_metadata", "read_watermark"]

_WATERMARK = re.compile(r"^agui-notifier:v1:w=(-?\d+)$")
_SLACK = 1024


def commit_metadata(watermark_ms: int) -> str:
    """The offset commit's metadata: the partition's watermark."""
    return f"agui-notifier:v1:w={watermark_ms}"


def read_watermark(metadata: str | None) -> int | None:
    """The watermark a commit carries; None when it carries none (then nothing is assumed sent)."""
    found = _WATERMARK.match(metadata or "")
    return int(found.group(1)) if found else None


class Book:
    """The notifier's memory of one ``threads`` partition."""

    def __init__(self, scope: str, partition: int) -> None:
        self.scope = scope
        self.partition = partition
        self.threads: dict[str, Seen] = {}
        self.watermark_ms = 0
        self.active = False
        self._deadlines: list[tuple[int, str]] = []
        self._rebuild_at = _SLACK

    def restore(self, thread_id: str, state: ThreadState | None) -> None:
        """Apply a record from before the committed offset: remembered, not notified."""
        self._remember(thread_id, seen_of(state, self.threads.get(thread_id)))

    def activate(self, watermark_ms: int) -> None:
        """Start notifying; expiries at or before ``watermark_ms`` were notified already."""
        self.watermark_ms = watermark_ms
        self.active = True
        for thread_id, seen in list(self.threads.items()):
            self.threads[thread_id], _ = expire(self.scope, thread_id, seen, watermark_ms)
        self._rebuild()

    def apply(self, thread_id: str, state: ThreadState | None, record_at: datetime
              ) -> list[WebhookEvent]:
        """A record after the committed offset: what is due before it, then its change."""
        at = state.updated_at if state is not None and state.updated_at else record_at
        events = self.advance(to_epoch_ms(at))
        after, changed = transition(self.scope, thread_id, self.threads.get(thread_id), state,
                                    record_at)
        events += changed
        if after is not None:
            after, overdue = expire(self.scope, thread_id, after, self.watermark_ms)
            events += overdue
        self._remember(thread_id, after)
        return events

    def advance(self, now_ms: int, most: int | None = None) -> list[WebhookEvent]:
        """Move the clock to ``now_ms`` (never back); the expiries that come due.

        With ``most``, at most that many deadlines are taken; the clock then stops
        just before the first one left, so the watermark committed after them never
        passes an expiry not told yet (``due`` says whether one is left).
        """
        clock = max(self.watermark_ms, now_ms)
        events: list[WebhookEvent] = []
        taken = 0
        while self._deadlines and self._deadlines[0][0] <= clock:
            if most is not None and taken >= most:
                self.watermark_ms = max(self.watermark_ms, self._deadlines[0][0] - 1)
                return events
            _, thread_id = heapq.heappop(self._deadlines)
            taken += 1
            seen = self.threads.get(thread_id)
            if seen is not None:
                self.threads[thread_id], due = expire(self.scope, thread_id, seen, clock)
                events += due
        self.watermark_ms = clock
        return events

    def due(self, now_ms: int) -> bool:
        """Whether a deadline at or before ``now_ms`` (or the clock) is still to be taken."""
        return bool(self._deadlines) and self._deadlines[0][0] <= max(self.watermark_ms, now_ms)

    def next_deadline(self) -> datetime | None:
        """The earliest pending deadline (possibly stale), for the loop's poll timeout."""
        return from_epoch_ms(self._deadlines[0][0]) if self._deadlines else None

    @property
    def scheduled(self) -> int:
        """Entries in the deadline heap, stale ones included (bounded by the rebuilds)."""
        return len(self._deadlines)

    @property
    def pending(self) -> int:
        """Interrupts open on this partition."""
        return sum(len(s.waiting) for s in self.threads.values())

    def _remember(self, thread_id: str, seen: Seen | None) -> None:
        before = self.threads.get(thread_id)
        if seen is None:
            self.threads.pop(thread_id, None)
            return
        self.threads[thread_id] = seen
        if self.active:
            known = set(before.deadlines()) if before else set()
            for deadline in set(seen.deadlines()) - known:
                heapq.heappush(self._deadlines, (deadline, thread_id))
            if len(self._deadlines) > self._rebuild_at:
                self._rebuild()

    def _rebuild(self) -> None:
        """The heap of live deadlines only; next rebuilt once it has doubled."""
        self._deadlines = [(d, t) for t, s in self.threads.items() for d in set(s.deadlines())]
        heapq.heapify(self._deadlines)
        self._rebuild_at = 2 * len(self._deadlines) + _SLACK
