"""Where a replay with ``Last-Event-ID`` starts reading: a search over offsets — pure.

A replay read its run from the run's start (or admission) and skipped what the
client had: a client reconnecting near the end of a run of a million events
made the instance read the million again, each time. Within one run on its
thread's partition, offsets and sequence numbers rise together (other threads'
records sit between them; a worker takeover may repeat a number at its seam,
which the stream's ``Sequencer`` drops), so where the client's number sits can
be found by looking at a few offsets: a probe at offset ``o`` reads forward
from ``o`` to the first record of the run (a fetch or a few) and compares its
sequence number with a target. ``OffsetSearch`` gallops back from its upper
bound (a reconnect near the end costs a few small fetches) and then bisects.

``Seek`` runs two such searches: the first finds the first record past the
client's number (``after``), or, when none is there yet, the run's last record;
the second, below it, the first record numbered ``after - SEAM`` or more (or
the last record's number less ``2 * SEAM``; an ``after`` below ``SEAM`` reads
the run from its start, as before). The replay reads
from there, as it read from the run's start: what it skips holds only numbers
the client has (dropped by the stream anyway), and whether the run ended (its
terminal event, when nothing follows ``after``) is still read. The answer is
the one reading the whole run gives when no record of the run is numbered more
than ``SEAM`` below one written before it (a seam repeats a few numbers), and
none after its terminal event more than ``SEAM`` above it
(``tests/unit/consumer/test_consumer_seek.py`` checks both, Hypothesis).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.consumer.ordering import DEFAULT_WINDOW

SEAM = DEFAULT_WINDOW
"""Sequence numbers read before the point found: the disorder a seam may leave (a
worker's repeated or late records), as much as a stream's ``Sequencer`` holds."""

Found = tuple[int, int]
"""A record of the run: (offset, sequence number)."""


class OffsetSearch:
    """The lowest offset from which the first record of the run has a sequence number of
    at least ``target``, between ``lo`` and ``hi`` (``hi`` when none has).

    Invariants: every record of the run before ``lo`` has a lower number (``below`` is
    the last of them seen), and the first record of the run at or after ``hi`` (if any)
    has at least ``target``. Each probe narrows the range between them.
    """

    __slots__ = ("_at", "_bisect", "_origin", "_step", "above", "below", "hi", "lo", "target")

    def __init__(self, lo: int, hi: int, target: int) -> None:
        self.lo, self.hi, self.target = lo, hi, target
        self.below: Found | None = None
        self.above: Found | None = None
        """The first record of the run at or after ``hi``, when one was found."""
        self._step = 1
        self._bisect = False
        self._origin: int | None = None
        """The offset probed, while its probe reads on to find a record of the run."""
        self._at = lo

    @property
    def done(self) -> bool:
        return self.lo >= self.hi

    def probe(self) -> int | None:
        """The offset to read from next; None once the search is done."""
        if self.done:
            return None
        if self._origin is None:
            self._origin = self._at = ((self.lo + self.hi) // 2 if self._bisect
                                       else max(self.lo, self.hi - self._step))
        return self._at

    def saw(self, run: Sequence[Found], upto: int) -> None:
        """What a read from ``probe()`` found: the run's records in it, in offset order,
        and the offset after the last record read."""
        origin = self._origin
        assert origin is not None, "saw() without probe()"
        first = next(((o, s) for o, s in run if self._at <= o < self.hi), None)
        if first is None:
            if upto < self.hi:  # nothing of the run yet: the probe reads on
                self._at = max(upto, self._at)
                return
            self.hi = origin  # no record of the run from the origin to ``hi``
            self._step *= 2
        elif first[1] >= self.target:
            self.hi, self.above = origin, first
            self._step *= 2
        else:
            self.lo, self.below = first[0] + 1, first
            self._bisect = True
        self._origin = None


class Seek:
    """Where to start reading a run for a client that has every number up to ``after``,
    between ``base`` (where the run's records can begin) and ``end`` (see the module
    docstring). ``probe``/``saw`` as ``OffsetSearch``; ``start`` once ``probe`` is None."""

    __slots__ = ("_second", "base", "end", "seam", "search")

    def __init__(self, base: int, end: int, after: int, seam: int = SEAM) -> None:
        self.base, self.end, self.seam = base, end, seam
        self._second = after < seam  # then the run is read from its start, as before
        self.search = OffsetSearch(base, base if self._second else end, after + 1)

    def probe(self) -> int | None:
        offset = self.search.probe()
        if offset is not None or self._second:
            return offset
        first = self.search
        if first.above is not None:  # a record past ``after``: from ``seam`` before it
            target, hi = first.target - 1 - self.seam, first.hi
        elif first.below is not None:  # none: from twice ``seam`` before the last record
            target, hi = first.below[1] - 2 * self.seam, first.below[0]
        else:
            return None  # nothing of the run from base to end
        self._second = True
        self.search = OffsetSearch(self.base, hi, target)
        return self.search.probe()

    def saw(self, run: Sequence[Found], upto: int) -> None:
        self.search.saw(run, upto)

    @property
    def start(self) -> int:
        """The offset to read the run from (``end``: the run has no record to read)."""
        assert self.search.done, "start before the search is done"
        return self.search.hi if self._second else self.end
