"""Which records ``tail`` shows, and from when: pure parsing and matching.

``RecordFilter`` matches one ``OpsRecord`` against ``--thread``, ``--run``,
``--type`` and ``--agent``. Each applies where the record says something
about it: an event by its key and headers (run id, event type, agent), a
decision by its key and body (``runId``, ``agent``), a dead letter by its
key or the original record's key. ``--type`` selects event types only;
decisions and dead letters the user asked to interleave pass it.
``parse_since`` reads ``--since`` as an ISO 8601 instant or a duration back
from now (``90s``, ``10m``, ``2h``, ``1d``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from contracts.headers import AGENT, EVENT_TYPE, RUN_ID
from services.kafka.records import OpsRecord

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime) -> datetime:
    """An aware instant from ISO 8601 (naive means UTC) or a duration ago."""
    match = _DURATION.match(text)
    if match:
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError as exc:
            raise ValueError(f"--since {text!r}: reaches before year 1") from exc
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ValueError(
            f"--since {text!r}: expected an ISO 8601 time (2026-11-30T10:00:00Z) "
            "or a duration such as 90s, 10m, 2h, 1d"
        ) from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def to_epoch_ms(moment: datetime) -> int:
    """Milliseconds since the epoch, as Kafka timestamps are."""
    return int(moment.timestamp() * 1000)


def split_types(values: Iterable[str]) -> frozenset[str]:
    """``--type`` values (repeatable, comma separated, any case) as event type names."""
    return frozenset(
        part.strip().upper() for value in values for part in value.split(",") if part.strip()
    )


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """What ``tail`` keeps; an unset criterion keeps everything."""

    thread: str | None = None
    run: str | None = None
    types: frozenset[str] = frozenset()
    agent: str | None = None

    def matches(self, rec: OpsRecord) -> bool:
        """True when ``rec`` passes every criterion that applies to it."""
        if rec.role == "events":
            return self._event(rec)
        if rec.role == "decisions":
            body = rec.fields
            return (self._same(self.thread, rec.key or body.get("threadId"))
                    and self._same(self.run, body.get("runId"))
                    and self._same(self.agent, body.get("agent")))
        if rec.role == "deadletter":
            return self.thread is None or self.thread in (rec.key, rec.fields.get("key"))
        return self._same(self.thread, rec.key)

    def _event(self, rec: OpsRecord) -> bool:
        if not self._same(self.thread, rec.key):
            return False
        body = rec.fields
        if not self._same(self.run, rec.headers.get(RUN_ID) or body.get("runId")):
            return False
        event_type = rec.headers.get(EVENT_TYPE) or body.get("type")
        if self.types and (not isinstance(event_type, str) or event_type.upper() not in self.types):
            return False
        return self._same(self.agent, rec.headers.get(AGENT))

    @staticmethod
    def _same(wanted: str | None, actual: object) -> bool:
        return wanted is None or wanted == actual
