"""Which refusals of an upstream are tried again, and how long the worker waits — pure.

A request is tried again only before the upstream started a run: when it is
unreachable, or answers 429, 502, 503 or 504. A 429 is tried again too: the
upstream refused before doing anything (a second request cannot run the run
twice), and a rate limit is what a later attempt can get past. The wait is the
worker's own backoff (``RETRY_BACKOFF_S``, doubling per attempt) or, when the
answer says so, its ``Retry-After`` (RFC 9110 section 10.2.3: seconds, or an HTTP
date), whichever is longer: a 503 asking for 30 s had been tried again after
0.2 s and 0.6 s. The caller ends the run at once when the upstream asks for more
than the run has left.
"""

from __future__ import annotations

import re
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = ["RETRIED_STATUS", "RETRY_BACKOFF_S", "backoff", "retry_after"]

RETRIED_STATUS = frozenset({429, 502, 503, 504})
RETRY_BACKOFF_S = 0.2
_SECONDS = re.compile(r"[0-9]+")


def backoff(attempt: int) -> float:
    """The worker's own wait before attempt ``attempt`` (1 for the first retry)."""
    return RETRY_BACKOFF_S * 2.0 ** (attempt - 1)


def retry_after(value: str | None, now: float) -> float | None:
    """The seconds a ``Retry-After`` value asks the worker to wait, from ``now`` (Unix
    time, for an HTTP date); None when there is none or it cannot be read."""
    if value is None:
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no claim about the sender's zone
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - now, 0.0)
