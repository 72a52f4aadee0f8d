"""The events of the threads that lapse together, gathered from one read of their partition.

10,000 interrupts given one deadline lapse at once; the expirer read the
events partition from each thread's run admission (less a minute) to the
end for every thread, so every other thread's events were read again for
each: the last of 10,000 would have been cancelled ~27 minutes late (found
by probing). ``Histories`` is fed one read of the partition, from the
earliest of the due threads' starts, and keeps only their records: what
it holds is what those threads need, never the window.

Each thread still gets exactly what a read of its own would have: records
from the first offset whose timestamp reaches its start (where
``Start.at`` seeks: the read is in offset order, so that is the first
record at which the highest timestamp seen reaches it), its key's records
with a value, resent copies dropped by their run and sequence headers, and
values that are not a JSON object skipped. Pure: no I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

from contracts.headers import RUN_ID, SEQ
from services.kafka.clients import ConsumerRecord

EARLIEST = -(2**63)
"""The start of a thread read from the partition's beginning (no admission time known)."""


class Histories:
    """The due threads' event values, by thread, from one read of their partition."""

    def __init__(self, since: Mapping[str, int | None]) -> None:
        """``since``: each due thread's start (epoch ms; None: the partition's beginning)."""
        self._since = {t.encode(): EARLIEST if ms is None else ms for t, ms in since.items()}
        self._kept: dict[bytes, list[bytes]] = {key: [] for key in self._since}
        self._seen: dict[bytes, set[tuple[bytes | None, bytes | None]]] = {
            key: set() for key in self._since}
        self._latest = EARLIEST
        """The highest timestamp read so far (records come in offset order)."""

    def start_ms(self) -> int | None:
        """Where the read begins (epoch ms), or None for the partition's beginning."""
        earliest = min(self._since.values(), default=EARLIEST)
        return None if earliest == EARLIEST else earliest

    def add(self, records: Iterable[ConsumerRecord[Any, Any]]) -> None:
        """Take the next records of the partition (any order within the batch)."""
        for record in sorted(records, key=lambda r: r.offset):
            self._latest = max(self._latest, record.timestamp)
            since = self._since.get(record.key)
            if since is None or record.value is None or self._latest < since:
                continue
            headers = dict(reversed(record.headers or ()))  # the first of a name wins
            run, seq = headers.get(RUN_ID), headers.get(SEQ)
            if run is not None and seq is not None:
                seen = self._seen[record.key]
                if (run, seq) in seen:
                    continue
                seen.add((run, seq))
            self._kept[record.key].append(record.value)

    def take(self, thread_id: str) -> list[bytes]:
        """The thread's event values in partition order (given up: held no longer)."""
        key = thread_id.encode()
        self._seen.pop(key, None)
        return self._kept.pop(key, [])


def decoded(values: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The events among ``values`` (one that is not a JSON object is skipped)."""
    for raw in values:
        with contextlib.suppress(orjson.JSONDecodeError):
            value = orjson.loads(raw)
            if isinstance(value, dict):
                yield value
