"""The lapsed threads' events from one read of their partition: each thread gets what a
read of its own (from its start to the end) would have given it, and nothing else."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from contracts.headers import RUN_ID, SEQ
from services.gatekeeper.expiry_history import Histories, decoded
from services.kafka.clients import ConsumerRecord

pytestmark = pytest.mark.unit

T0 = 1_796_284_800_000


def record(offset: int, key: bytes | None, value: Any, *, at: int = T0,
           headers: list[tuple[str, bytes | None]] | None = None) -> ConsumerRecord[Any, Any]:
    raw = value if isinstance(value, bytes) or value is None else orjson.dumps(value)
    return ConsumerRecord("unit.events", 0, offset, at, 0, key, raw, None,
                          len(key or b""), len(raw or b""), headers or [])


def events(histories: Histories, thread: str) -> list[Any]:
    return list(decoded(histories.take(thread)))


def test_the_read_begins_at_the_earliest_start_or_the_beginning() -> None:
    assert Histories({"a": T0, "b": T0 - 5}).start_ms() == T0 - 5
    assert Histories({"a": T0, "b": None}).start_ms() is None


def test_each_thread_keeps_its_own_records_from_its_own_start() -> None:
    histories = Histories({"early": T0 - 1000, "late": T0})
    histories.add([
        record(0, b"late", {"n": "late-before-its-start"}, at=T0 - 500),
        record(1, b"early", {"n": "early-1"}, at=T0 - 500),
        record(2, b"other", {"n": "not due"}, at=T0 + 1),
        record(3, b"late", {"n": "late-1"}, at=T0 + 1),
    ])
    # after the first record reaching its start, a thread takes every record of its key,
    # an older timestamp included (where a read of its own from Start.at would have begun)
    histories.add([record(5, b"late", {"n": "late-3"}, at=T0 - 900),
                   record(4, b"late", {"n": "late-2"}, at=T0 + 2)])
    assert events(histories, "early") == [{"n": "early-1"}]
    assert events(histories, "late") == [{"n": "late-1"}, {"n": "late-2"}, {"n": "late-3"}]
    assert histories.take("late") == []  # given up once taken


def test_a_thread_without_a_start_takes_everything_read() -> None:
    histories = Histories({"t": None, "u": T0})
    histories.add([record(0, b"t", {"n": 0}, at=0), record(1, b"u", {"n": 0}, at=0)])
    assert events(histories, "t") == [{"n": 0}]
    assert events(histories, "u") == []


def test_resent_copies_null_and_unreadable_values_are_dropped() -> None:
    def sent(seq: bytes, *extra: tuple[str, bytes | None]) -> list[tuple[str, bytes | None]]:
        return [(RUN_ID, b"r1"), (SEQ, seq), *extra]

    histories = Histories({"t": T0})
    histories.add([
        record(0, b"t", {"n": 1}, headers=sent(b"1")),
        record(1, b"t", {"n": "copy"}, headers=sent(b"1", (SEQ, b"2"))),  # first one wins
        record(2, b"t", None, headers=sent(b"2")),
        record(3, b"t", b"{not json", headers=sent(b"3")),
        record(4, b"t", [1, 2], headers=sent(b"4")),
        record(5, b"t", {"n": 2}, headers=sent(b"2")),
        record(6, b"t", {"n": "no seq"}, headers=[(RUN_ID, b"r1")]),
        record(7, b"t", {"n": "no seq"}, headers=[(RUN_ID, b"r1")]),
        record(8, None, {"n": "no key"}),
    ])
    assert events(histories, "t") == [{"n": 1}, {"n": 2}, {"n": "no seq"}, {"n": "no seq"}]
