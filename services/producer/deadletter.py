"""Dead letters the producer writes: the shared construction, bound to the worker's guard.

A dispatch the worker cannot use (unreadable, or so large that not even the
RUN_ERROR refusing it fits) is kept on ``deadletter`` with where it came
from and why, and skipped. The letter is built as every service builds one
(``services.kafka.deadletters``: key, value, headers and reason cut to fixed
bounds, the reason saying what was cut; origin and reason only when even
that does not fit ``AGUI_MAX_RECORD_BYTES``); ``fitted`` gives it as the
record ``host`` sends. Pure: it builds bytes, ``host`` sends them.
"""

from __future__ import annotations

from datetime import datetime

from contracts import encode
from services.kafka.deadletters import Source, fitting, letter_key
from services.producer.sizes import RecordGuard

__all__ = ["Source", "fitted"]


def fitted(source: Source, code: str, reason: str, failed_at: datetime,
           guard: RecordGuard) -> tuple[bytes | None, bytes]:
    """The letter about ``source`` as its record's key and value, within ``guard``'s limit."""
    letter = fitting(source, code, reason, failed_at, service="producer", limit=guard.limit)
    return letter_key(letter), encode(letter)
