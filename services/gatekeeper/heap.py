"""Running CPython's cyclic garbage collector on the gatekeeper's schedule.

Every owned thread's state lives in memory and each decision allocates a few
dozen objects, nearly all of which either die at once (reference counting
frees them) or live on as a thread's new state. None of them forms a
reference cycle (measured: a full collection after 40,000 decisions with the
collector off found nothing to free), yet the collector, triggered by
allocation counts, rescans whatever is alive: with CPython's default
thresholds (700, 10, 10) the gatekeeper decided 4,600 requests/s against
9,600/s with rarer passes, and even rare passes cost a fifth of the time of
a 5,000-request batch, plus 600-800 ms pauses when an older generation came
due.

So automatic collection is off, and the collector makes one pass every
``full_every_s`` (checked after each commit), over everything allocated
since the last pass; what survives a pass, or a restore, is frozen
(``gc.freeze``: out of every later pass, still freed by reference counting).
A cycle that forms among frozen objects is never reclaimed; none does in the
gatekeeper's own code, so that leak is bounded by what libraries might do,
and the periodic pass catches every cycle that forms and dies between two
passes. Process-wide, like the service.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Heap:
    """When the cyclic collector runs, and what it no longer looks at."""

    def __init__(self, full_every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.full_every_s = full_every_s
        self._clock = clock
        self._last_pass = clock()
        self.passes = 0

    def start(self) -> None:
        """Turn automatic collection off for the rest of the process."""
        gc.disable()
        self._last_pass = self._clock()

    def stop(self) -> None:
        """Automatic collection back on (the process may go on: tests, benchmarks)."""
        gc.unfreeze()
        gc.enable()

    def settle(self) -> None:
        """After a commit: one pass when it is due."""
        if self._clock() - self._last_pass >= self.full_every_s:
            self.collect()

    def freeze(self) -> None:
        """What is alive now stays (restored states): keep it out of every later pass."""
        gc.freeze()

    def collect(self) -> int:
        """One pass over everything not frozen, then freeze the survivors; returns the freed."""
        started = self._clock()
        freed = gc.collect()
        gc.freeze()
        self._last_pass = self._clock()
        self.passes += 1
        log.debug(
            "garbage collection: %d objects freed in %.0f ms",
            freed,
            (self._last_pass - started) * 1000,
        )
        return freed
