"""Dead letters, one construction for every service: the refused record, cut so the letter fits.

A dead letter exists because a record could not be used, and the record's
size is often why: a 400,000-character key, a value near the broker's limit,
headers nobody bounded. A letter copying any of them whole could itself be
refused by the broker — failing the send, or the transaction that was to
move a partition past the record, and so the partition again. So every part
a client chose is cut to a fixed bound here — the key, the value, each
header and the reason — and the reason says what was cut; a letter so cut
stays under 1 MiB however its parts are escaped in JSON (at most six bytes a
byte: about 400 KB for the value, as much for the headers). ``minimal``
keeps the origin and the reason only, for a smaller ``AGUI_MAX_RECORD_BYTES``
the cut letter does not fit (``fitting``), or a letter the broker refused
after all. The gatekeeper and the producer workers both build their letters
here, so a letter reads the same whoever wrote it.

Pure: the clock is an argument, nothing is sent.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from contracts import DeadLetter, encode
from services.kafka.sizing import RecordLimit

__all__ = [
    "DEAD_LETTER_HEADERS", "DEAD_LETTER_HEADER_LIMIT", "DEAD_LETTER_KEY_LIMIT",
    "DEAD_LETTER_VALUE_LIMIT", "REASON_LIMIT", "InRecord", "Service", "Source", "cut",
    "dead_letter", "fitting", "letter_key",
]

Service = Literal["gatekeeper", "producer", "notifier"]

DEAD_LETTER_VALUE_LIMIT = 65_536
"""Bytes of a refused record's value kept in its dead letter."""
DEAD_LETTER_KEY_LIMIT = 1_024
"""Characters of a refused record's key kept in its dead letter (and as the letter's key)."""
DEAD_LETTER_HEADERS = 32
"""Headers of a refused record kept in its dead letter."""
DEAD_LETTER_HEADER_LIMIT = 1_024
"""Characters of each header name and value kept."""
REASON_LIMIT = 2_000
"""Characters of a reason kept (a reason may quote what a client sent)."""
MINIMAL_KEY_LIMIT = 64
MINIMAL_REASON_LIMIT = 400


class InRecord(Protocol):
    """The parts of a consumed record a letter quotes (aiokafka's ConsumerRecord has them)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True, slots=True)
class Source:
    """An ``InRecord`` spelled out, for a caller holding the parts rather than the record."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, saying how much was left off."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit})"


def letter_key(letter: DeadLetter) -> bytes | None:
    """The key a letter's record is written with: the (cut) key of the record it is about."""
    return letter.key.encode() if letter.key is not None else None


def dead_letter(record: InRecord, code: str, reason: str, now: datetime, *,
                service: Service, minimal: bool = False) -> DeadLetter:
    """The dead letter for ``record``: its raw value, key and headers (cut), origin, reason."""
    notes: list[str] = []
    value = b"" if minimal else record.value or b""
    if minimal and record.value:
        notes.append(f"value of {len(record.value)} bytes left out")
    elif len(value) > DEAD_LETTER_VALUE_LIMIT:
        notes.append(f"value cut to {DEAD_LETTER_VALUE_LIMIT} of {len(value)} bytes")
        value = value[:DEAD_LETTER_VALUE_LIMIT]
    try:
        text, encoding = value.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(value).decode("ascii"), "base64"
    key = record.key.decode("utf-8", "replace") if record.key is not None else None
    key_limit = MINIMAL_KEY_LIMIT if minimal else DEAD_LETTER_KEY_LIMIT
    if key is not None and len(key) > key_limit:
        notes.append(f"key cut to {key_limit} of {len(key)} characters")
        key = key[:key_limit]
    headers = None if minimal else _headers(record.headers, notes)
    if minimal and record.headers:
        notes.append(f"{len(record.headers)} headers left out")
    reason = cut(reason, MINIMAL_REASON_LIMIT if minimal else REASON_LIMIT)
    return DeadLetter(
        source_topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=key,
        value=text,
        value_encoding="utf-8" if encoding == "utf-8" else "base64",
        headers=headers,
        reason=f"{reason} ({'; '.join(notes)})" if notes else reason,
        code=code,
        service=service,
        failed_at=now,
    )


def fitting(record: InRecord, code: str, reason: str, now: datetime, *, service: Service,
            limit: RecordLimit, minimal: bool = False) -> DeadLetter:
    """``dead_letter``, made minimal when the cut letter does not fit ``limit`` (or when asked)."""
    letter = dead_letter(record, code, reason, now, service=service, minimal=minimal)
    if not minimal and not limit.fits(letter_key(letter), encode(letter)):
        letter = dead_letter(record, code, reason, now, service=service, minimal=True)
    return letter


def _headers(headers: Sequence[tuple[str, bytes | None]],
             notes: list[str]) -> dict[str, str] | None:
    texts = [(k, v.decode("utf-8", "replace") if v is not None else "")
             for k, v in headers[:DEAD_LETTER_HEADERS]]
    if len(headers) > DEAD_LETTER_HEADERS:
        notes.append(f"{DEAD_LETTER_HEADERS} of {len(headers)} headers kept")
    if any(max(len(k), len(v)) > DEAD_LETTER_HEADER_LIMIT for k, v in texts):
        notes.append(f"headers cut to {DEAD_LETTER_HEADER_LIMIT} characters")
    limit = DEAD_LETTER_HEADER_LIMIT
    return {cut(k, limit): cut(v, limit) for k, v in texts} or None
