"""Kafka headers: how an event record says whose run it belongs to.

An AG-UI ``RUN_ERROR`` carries no runId, and consumers must restore order and
drop duplicates without decoding every value, so each event record carries
its run id, event type, agent and a per-run sequence number as headers. A
reader filters on the type header before touching the JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Headers = Sequence[tuple[str, bytes | None]]
"""aiokafka's header shape: (name, value) pairs. A value can be null: the record format
allows it, and any client may write one."""

RUN_ID = "agui-run-id"
EVENT_TYPE = "agui-event-type"
AGENT = "agui-agent"
SEQ = "agui-seq"
SCHEMA = "agui-schema-version"
TRACEPARENT = "traceparent"


def header_value(headers: Headers | None, name: str) -> str | None:
    """The first value of header ``name`` as text, or None when absent (or null)."""
    for key, value in headers or ():
        if key == name:
            return value.decode("utf-8", "replace") if value is not None else None
    return None


def ascii_int(text: str | None, *, signed: bool = False) -> int | None:
    """``text`` as an integer when it is ASCII decimal digits (after one ``-`` when
    ``signed``), else None. ``str.isdigit`` also takes ``²`` and Arabic-Indic digits, which
    ``int`` refuses or reads: one record with ``agui-seq: ²`` stopped a worker's recovery
    and cut every replay of its run (found by probing)."""
    if text is None:
        return None
    digits = text[1:] if signed and text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(text)


def with_header(headers: Headers | None, name: str,
                value: str | None) -> list[tuple[str, bytes | None]]:
    """``headers`` plus ``name: value`` (unchanged when value is None)."""
    out = [(k, v) for k, v in headers or () if k != name]
    if value is not None:
        out.append((name, value.encode()))
    return out


@dataclass(frozen=True, slots=True)
class EventHeaders:
    """The headers of one record on the ``events`` topic."""

    run_id: str
    event_type: str
    agent: str
    seq: int
    traceparent: str | None = None

    def encode(self) -> list[tuple[str, bytes]]:
        """As aiokafka headers."""
        out = [
            (RUN_ID, self.run_id.encode()),
            (EVENT_TYPE, self.event_type.encode()),
            (AGENT, self.agent.encode()),
            (SEQ, str(self.seq).encode()),
            (SCHEMA, b"1"),
        ]
        if self.traceparent:
            out.append((TRACEPARENT, self.traceparent.encode()))
        return out

    @classmethod
    def decode(cls, headers: Headers | None) -> EventHeaders | None:
        """Read them back; None when a required header is missing or malformed."""
        run_id = header_value(headers, RUN_ID)
        event_type = header_value(headers, EVENT_TYPE)
        agent = header_value(headers, AGENT)
        seq = header_value(headers, SEQ)
        if run_id is None or event_type is None or agent is None or seq is None:
            return None
        try:
            number = int(seq)
        except ValueError:
            return None
        return cls(run_id, event_type, agent, number, header_value(headers, TRACEPARENT))
