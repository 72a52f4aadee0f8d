"""Per-run ordering and SSE framing: pure, no I/O, no clock.

A run's event records carry a per-run sequence number (header ``agui-seq``).
Kafka keeps one thread's records in partition order, but an at-least-once
writer can repeat a record and a recovering worker can write after a stale
one, so every stream passes its records through a ``Sequencer``: it drops
anything at or below what it already delivered (duplicates, stale records),
holds a record that arrives ahead of a gap, and delivers held records in
order as soon as the gap fills. A gap that never fills is given up with
``release()`` (the stream calls it after a short wait), so a lost sequence
number delays a stream but never stalls it.

Frames follow the AG-UI HTTP binding: one event JSON object per ``data:``
line, LF only, an ``id:`` line carrying the sequence number (ignored by
AG-UI clients, used by ``Last-Event-ID`` on the replay route), and
``: keep-alive`` comments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import orjson

T = TypeVar("T")

TERMINAL_TYPES = frozenset({"RUN_FINISHED", "RUN_ERROR"})
FIRST_SEQ = 0
"""A run's first sequence number: its ``RUN_STARTED``."""
KEEPALIVE = b": keep-alive\n\n"
DEFAULT_WINDOW = 256


@dataclass(slots=True)
class Sequencer(Generic[T]):
    """Restores per-run order and drops duplicates.

    ``after`` is the last sequence number delivered (or the client's
    ``Last-Event-ID``); ``None`` means nothing yet, so the first record
    offered opens the sequence. At most ``window`` records are held.
    """

    after: int | None = None
    window: int = DEFAULT_WINDOW
    _held: dict[int, T] = field(default_factory=dict)

    @property
    def waiting(self) -> bool:
        """True while records are held behind a gap."""
        return bool(self._held)

    def offer(self, seq: int, item: T) -> list[tuple[int, T]]:
        """Take one record; return what can be delivered now, in order."""
        if (self.after is not None and seq <= self.after) or seq in self._held:
            return []
        if self.after is not None and seq != self.after + 1:
            self._held[seq] = item
            return self.release() if len(self._held) > self.window else []
        self.after = seq
        out = [(seq, item)]
        while self._held and self.after + 1 in self._held:
            self.after += 1
            out.append((self.after, self._held.pop(self.after)))
        return out

    def offer_all(self, items: Iterable[tuple[int, T]]) -> list[tuple[int, T]]:
        """``offer`` each (seq, item) in turn; what can be delivered now, in order. The
        common case, each record the next one with nothing held, takes no detour."""
        out: list[tuple[int, T]] = []
        for seq, item in items:
            after = self.after
            if not self._held and (after is None or seq == after + 1):
                self.after = seq
                out.append((seq, item))
            else:
                out += self.offer(seq, item)
        return out

    def release(self) -> list[tuple[int, T]]:
        """Give up on the gap: deliver every held record in order."""
        out = sorted(self._held.items())
        self._held.clear()
        if out:
            self.after = out[-1][0]
        return out


def sse_value(value: bytes) -> bytes | None:
    """``value`` as one ``data:`` line, or None when it is not one JSON object.

    The producer's bytes pass as they are: an object, and orjson never writes
    a line break. A value from another writer may hold one (it is compacted:
    same JSON, no line breaks, so the frame cannot be split) or not be JSON
    at all (None: framed, it would break the client's parsing of the stream).
    Only the shape is tested ("{" first, "}" last, no LF or CR), not parsed:
    the producer's values have it, and parsing every event would cost more than
    framing it. The bytes are tested as ints: ``10 in value`` costs a tenth of
    ``b"\\n" in value``, once per event and stream.
    """
    if value and value[0] == 123 and value[-1] == 125 and not (10 in value or 13 in value):
        return value  # "{" ... "}", no LF or CR
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return orjson.dumps(parsed) if isinstance(parsed, dict) else None


def data_frame(value: bytes, seq: int | None = None) -> bytes:
    """One SSE frame carrying one event JSON object (``frame_parts`` of its ``sse_value``);
    ValueError when it is not one."""
    line = sse_value(value)
    if line is None:
        raise ValueError("not a JSON object")
    return b"".join(frame_parts(line, seq))


def frame_parts(line: bytes, seq: int | None = None) -> tuple[bytes, bytes, bytes]:
    """The three pieces of one SSE frame (``line``: an ``sse_value``), to be joined with
    others into one write."""
    return (b"id: %d\ndata: " % seq if seq is not None else b"data: "), line, b"\n\n"


def parse_last_event_id(raw: str | None) -> int | None:
    """The sequence number in a ``Last-Event-ID`` header; ValueError if malformed."""
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):  # int() took "+10", "1_0", Arabic digits
        raise ValueError("Last-Event-ID is a sequence number")
    value = int(text)
    if value < -1:
        raise ValueError("Last-Event-ID is a sequence number")
    return value


def missing_before(after: int | None, seq: int) -> range | None:
    """The sequence numbers gone before ``seq``, the first one read on the log past
    ``after`` (a client's ``Last-Event-ID``; None: from the run's start), or None.

    A run's records are written in order without a gap (``producer.publish``), so
    a first record past the one expected means the ones between were removed from
    the log (retention, delete-records) before this read."""
    expected = FIRST_SEQ if after is None else after + 1
    return range(expected, seq) if seq > expected else None
