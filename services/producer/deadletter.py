"""Dead letters the producer writes, cut so that a letter always fits a record.

A dispatch the worker cannot use (unreadable, or so large that not even the
RUN_ERROR refusing it fits) is kept on ``deadletter`` with where it came
from and why, and skipped. The letter quotes the source record's key and
value, so a letter about an oversized record would be oversized too and
fail its send in turn; ``fitted`` shortens the quoted key and value until
the letter's record fits ``AGUI_MAX_RECORD_BYTES`` (``sizes.RecordGuard``),
and says so in the reason. Pure: it builds bytes, ``host`` sends them.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime

from contracts import DeadLetter, encode
from services.producer.sizes import RecordGuard

KEY_SHOWN = 1024
"""Characters of the source key a letter quotes (and bytes of it its record is keyed by)."""
REASON_SHOWN = 4000
"""Characters of the reason a letter keeps."""
MAX_CUTS = 40


@dataclass(frozen=True, slots=True)
class Source:
    """Where the unusable record was: topic, partition, offset, its key and value."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit})"


def fitted(source: Source, code: str, reason: str, failed_at: datetime,
           guard: RecordGuard) -> tuple[bytes | None, bytes]:
    """The letter's record key and value: the source quoted whole when that fits,
    else with its value cut (in halves) until the letter fits."""
    raw = source.value or b""
    try:
        text, encoding = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(raw).decode(), "base64"
    key = source.key[:KEY_SHOWN] if source.key else None
    shown_key = _clip(source.key.decode("utf-8", "replace"), KEY_SHOWN) if source.key else None
    shown = len(text)
    for _ in range(MAX_CUTS):
        cut = shown < len(text)
        why = reason if not cut else f"{reason} (value cut to {shown} of {len(text)} characters)"
        letter = DeadLetter(
            source_topic=source.topic, partition=source.partition, offset=source.offset,
            key=shown_key, value=text[:shown], value_encoding=encoding,  # type: ignore[arg-type]
            reason=_clip(why, REASON_SHOWN), code=code, service="producer",
            failed_at=failed_at)
        value = encode(letter)
        if guard.limit.fits(key, value):
            return key, value
        shown //= 2
        if encoding == "base64":
            shown -= shown % 4  # whole base64 quanta
    raise ValueError("a dead letter does not fit even with its value cut away")
