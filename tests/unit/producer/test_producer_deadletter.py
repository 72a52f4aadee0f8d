"""A producer dead letter always fits a record, however large the record it is about."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from contracts import DeadLetter, decode
from services.kafka.deadletters import DEAD_LETTER_KEY_LIMIT as KEY_SHOWN
from services.kafka.sizing import record_size
from services.producer.deadletter import Source, fitted
from services.producer.sizes import RecordGuard

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def test_a_small_record_is_quoted_whole() -> None:
    key, value = fitted(Source("dispatch.a", 1, 7, b"t1", b'{"x": 1}'), "schema_invalid",
                        "bad", NOW, RecordGuard.of(1_048_576))
    letter = decode(DeadLetter, value)
    assert (key, letter.key, letter.value, letter.reason) == (b"t1", "t1", '{"x": 1}', "bad")
    assert (letter.source_topic, letter.partition, letter.offset) == ("dispatch.a", 1, 7)
    assert letter.service == "producer"


@pytest.mark.parametrize("raw", [b'{"threadId": "' + b"t" * 900_000 + b'"}',
                                 b"\xff" * 700_000])
def test_a_letter_about_an_oversized_record_is_cut_until_it_fits(raw: bytes) -> None:
    guard = RecordGuard.of(262_144)
    source = Source("dispatch.a", 0, 3, b"k" * 400_000, raw)
    key, value = fitted(source, "input_too_large", "too large", NOW, guard)
    assert record_size(key, value) <= 262_144
    letter = decode(DeadLetter, value)
    assert key == b"k" * KEY_SHOWN
    assert letter.key is not None
    assert letter.key.startswith("k" * KEY_SHOWN)
    assert "value cut to" in letter.reason
    assert letter.code == "input_too_large"
    if letter.value_encoding == "base64":
        assert base64.b64decode(letter.value) == raw[:len(base64.b64decode(letter.value))]
    else:
        assert raw.decode().startswith(letter.value)
