"""One Kafka record as a reader sees it: topic role, ids, headers, parsed value.

Shared by the operator tools (``services/cli/ops``) and the consumer service's
inbox routes, which read a thread's records the same way (``thread_log``).

Every command reads records from several topics (events, decisions,
dead letters, thread states) and treats them alike for filtering, printing
and ``--json`` output, so each is turned once into an ``OpsRecord``: the
key and headers as text, the value parsed as JSON when it is JSON (else
kept as text, ``None`` for a tombstone). The NDJSON form is one object per
record: ``{"topic", "partition", "offset", "timestamp", "key", "headers",
"value"}``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from contracts import DecodeError, ThreadState, TopicCatalog, decode
from contracts.headers import RUN_ID, SEQ, ascii_int

Role = str
"""``events``, ``decisions``, ``deadletter``, ``threads``, ``requests``, ``control``,
``dispatch`` or ``other``."""


@dataclass(frozen=True, slots=True)
class OpsRecord:
    """One record, decoded just enough to filter and print it."""

    topic: str
    role: Role
    partition: int
    offset: int
    timestamp_ms: int
    key: str | None
    headers: dict[str, str] = field(default_factory=dict)
    value: Any = None

    def to_json(self) -> dict[str, Any]:
        """The NDJSON object for ``--json``."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp_ms,
            "key": self.key,
            "headers": self.headers,
            "value": self.value,
        }

    def ndjson(self) -> str:
        """``to_json`` as one line of text."""
        return orjson.dumps(self.to_json()).decode()

    @property
    def fields(self) -> dict[str, Any]:
        """The value when it is a JSON object, else an empty dict."""
        return self.value if isinstance(self.value, dict) else {}


def role_of(topic: str, catalog: TopicCatalog) -> Role:
    """Which of the catalog's topics ``topic`` is."""
    for role in ("events", "decisions", "deadletter", "threads", "requests", "control"):
        if topic == getattr(catalog, role):
            return role
    if topic.startswith(f"{catalog.prefix}.dispatch."):
        return "dispatch"
    return "other"


def parse_value(raw: bytes | None) -> Any:
    """JSON when the bytes are JSON, the text otherwise, None for a tombstone."""
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


def from_kafka(record: Any, catalog: TopicCatalog) -> OpsRecord:
    """Build an ``OpsRecord`` from an aiokafka ``ConsumerRecord``."""
    key: bytes | None = record.key
    return OpsRecord(
        topic=record.topic,
        role=role_of(record.topic, catalog),
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp,
        key=key.decode("utf-8", "replace") if key is not None else None,
        headers={k: v.decode("utf-8", "replace") if v is not None else ""
                 for k, v in record.headers or ()},
        value=parse_value(record.value),
    )


class Deduper:
    """Drops resent copies of events, remembering a little per run, for a bounded number
    of runs.

    Producers are at-least-once towards Kafka and a recovering worker may write
    after a stale record, so an event whose sequence number (header
    ``agui-seq``) was already seen for its run is a copy (or stale) and is
    dropped. Remembering every ``(run, seq)`` pair grew a ``tail`` left
    following a busy deployment without bound (400,000 events: 167 MB); per
    run this keeps the number below which every one was seen and the few seen
    above it, at most ``AHEAD`` (past that the lowest is taken as the floor,
    as the consumer service's ``Sequencer`` gives up a gap), for the ``RUNS``
    runs seen last. Only the highest number per run was kept at first: one
    stray record with a run's headers and a high number hid the rest of the
    run (found by probing). A run is its thread's (the record key) and its
    run id together: run ids are the client's and unique per thread only, and
    keyed by the run id alone a second thread's ``run-1`` read as copies of the
    first's and vanished from a deployment-wide ``tail``. Records other than
    events pass, and so does an event whose number is not a decimal.
    """

    RUNS = 50_000
    """Runs remembered (least recently seen forgotten first)."""
    AHEAD = 64
    """Numbers remembered above a run's floor (seen out of order, or past a gap)."""

    def __init__(self, runs: int = RUNS) -> None:
        self._runs: OrderedDict[tuple[str | None, str], _Seen] = OrderedDict()
        self._limit = runs

    def fresh(self, rec: OpsRecord) -> bool:
        """False when ``rec`` is an event whose number was already seen for its run."""
        return rec.role != "events" or self.fresh_ids(rec.key, rec.headers.get(RUN_ID),
                                                      rec.headers.get(SEQ))

    def fresh_ids(self, thread: str | None, run: str | None, seq_text: str | None) -> bool:
        """``fresh`` for an event known by its key (the thread), run id and sequence
        header alone."""
        seq = ascii_int(seq_text)
        if run is None or seq is None:
            return True
        which = (thread, run)
        seen = self._runs.get(which)
        if seen is None:
            self._runs[which] = _Seen(seq)
            if len(self._runs) > self._limit:
                self._runs.popitem(last=False)
            return True
        self._runs.move_to_end(which)
        return seen.take(seq, self.AHEAD)


@dataclass(slots=True)
class _Seen:
    """One run's numbers seen: every one up to ``floor``, and ``ahead`` above it."""

    floor: int
    ahead: set[int] | None = None

    def take(self, seq: int, limit: int) -> bool:
        if seq <= self.floor or (self.ahead is not None and seq in self.ahead):
            return False
        if seq == self.floor + 1:
            self.floor = seq
        else:
            self.ahead = self.ahead or set()
            self.ahead.add(seq)
            if len(self.ahead) > limit:  # a gap that does not fill: given up
                self.floor = min(self.ahead)
                self.ahead.discard(self.floor)
        while self.ahead and self.floor + 1 in self.ahead:
            self.floor += 1
            self.ahead.discard(self.floor)
        return True


def drop_duplicate_events(records: Iterable[OpsRecord]) -> list[OpsRecord]:
    """``records`` without resent events, in order."""
    deduper = Deduper()
    return [rec for rec in records if deduper.fresh(rec)]

def latest_states(records: Iterable[OpsRecord]) -> tuple[dict[str, ThreadState], list[str]]:
    """The live state of each thread (last record per key wins), and why records were
    skipped: unreadable, or naming another thread than their key (another writer's)."""
    states: dict[str, ThreadState] = {}
    warnings: list[str] = []
    for rec in records:
        if rec.key is None:
            continue
        if rec.value is None:
            states.pop(rec.key, None)
            continue
        raw = rec.value if isinstance(rec.value, str) else orjson.dumps(rec.value)
        try:
            state = decode(ThreadState, raw)
        except DecodeError as exc:
            warnings.append(f"{rec.topic}[{rec.partition}]@{rec.offset}: unreadable state: {exc}")
            continue
        if state.thread_id != rec.key:  # another writer's: not this key's thread
            warnings.append(f"{rec.topic}[{rec.partition}]@{rec.offset}: state keyed "
                            f"{rec.key!r} names thread {state.thread_id!r}: skipped")
            continue
        states[rec.key] = state
    return states, warnings
