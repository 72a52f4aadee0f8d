"""When the gatekeeper's next transaction may begin — pure.

Every transaction costs about the same whatever it carries: some 2 ms of the
gatekeeper's CPU (five request/response round trips in pure Python) and the
broker's (its coordinator's log, the offsets, a commit marker on every
partition it touched). Begun back to back, as soon as the last one ends,
transactions at 200 runs/s each carry two or three runs, and on two cores
their cost is what brings the machine to saturation, where every hop of a
run queues for CPU. ``AGUI_GATEKEEPER_TRANSACTION_INTERVAL_MS`` sets the
least time between the starts of two transactions: batches that become
ready sooner wait and ride the next one together. When requests arrive
slower than that, the last transaction began long enough ago and nothing
waits; so the interval only takes effect where transactions would otherwise
run back to back. It takes little effect alone, though: where each fetch
returns with the first record that arrived, the polls, not the transactions,
are what a run costs. ``AGUI_GATEKEEPER_BATCH_MS`` batches both: each fetch
waits that long to fill, and transactions are paced to it.
"""

from __future__ import annotations


def wait_s(last_start: float | None, now: float, interval_s: float) -> float:
    """Seconds until a transaction may begin, the last one having begun at ``last_start``
    (monotonic seconds; None: none yet)."""
    if last_start is None or interval_s <= 0:
        return 0.0
    return max(0.0, last_start + interval_s - now)
