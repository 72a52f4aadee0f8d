"""Small pure pieces of the operator commands: lag rows, dead-letter lookup and decoding."""

from __future__ import annotations

import base64

import pytest

from services.cli.ops.deadletter import original, pick
from services.cli.ops.lag import lag_rows
from services.cli.ops.tail import start_of
from services.kafka.clients import TopicPartition
from services.kafka.reader import Start
from services.kafka.records import OpsRecord

pytestmark = pytest.mark.unit


def test_lag_is_end_minus_committed_never_negative() -> None:
    a0, a1 = TopicPartition("p.requests", 0), TopicPartition("p.requests", 1)
    rows = lag_rows({"gk": {a1: 5, a0: 2}, "cs": {a0: 9}}, {a0: 7, a1: 5})
    assert [(r.group, r.partition, r.lag) for r in rows] == [
        ("cs", 0, 0), ("gk", 0, 5), ("gk", 1, 0)]
    assert rows[1].to_json() == {"group": "gk", "topic": "p.requests", "partition": 0,
                                 "committed": 2, "end": 7, "lag": 5, "held": 0}


def test_held_is_what_an_open_transaction_keeps_past_the_end() -> None:
    a0, a1 = TopicPartition("p.dispatch.x", 0), TopicPartition("p.dispatch.x", 1)
    rows = lag_rows({"w": {a0: 39, a1: 5}}, {a0: 39, a1: 5}, {a0: 41, a1: 5})
    assert [(r.partition, r.lag, r.held) for r in rows] == [(0, 0, 2), (1, 0, 0)]


def letter(partition: int, offset: int, value: str, encoding: str = "utf-8") -> OpsRecord:
    return OpsRecord("p.deadletter", "deadletter", partition, offset, 0, None, {},
                     {"value": value, "valueEncoding": encoding, "reason": "r", "code": "c"})


def test_pick_by_number_or_partition_offset() -> None:
    letters = [letter(0, 4, "a"), letter(2, 9, "b")]
    assert pick(letters, "2") is letters[1]
    assert pick(letters, "2:9") is letters[1]
    assert pick(letters, "0:4") is letters[0]
    for missing in ("0", "3", "1:4", "x:y", "abc"):
        assert pick(letters, missing) is None


def test_original_value_is_decoded() -> None:
    assert original(letter(0, 0, '{"a": 1}')) == {"a": 1}
    assert original(letter(0, 0, "plain {")) == "plain {"
    encoded = base64.b64encode(b'{"b": 2}').decode()
    assert original(letter(0, 0, encoded, "base64")) == {"b": 2}
    assert original(letter(0, 0, "%%%", "base64")) == "%%%"


def test_start_position_from_flags() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 11, 30, tzinfo=UTC)
    assert start_of(False, None, now) == Start.end()
    assert start_of(True, None, now) == Start.beginning()
    assert start_of(False, "1970-01-01T00:00:01Z", now) == Start.at(1000)
    with pytest.raises(ValueError, match="not both"):
        start_of(True, "10m", now)


def test_one_thread_starts_at_its_history_unless_since_says_otherwise() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 11, 30, tzinfo=UTC)
    assert start_of(False, None, now, "t1") == Start.beginning()
    assert start_of(True, None, now, "t1") == Start.beginning()
    assert start_of(False, "1970-01-01T00:00:01Z", now, "t1") == Start.at(1000)
    assert start_of(False, None, now, None) == Start.end()
