"""One dead-letter construction: the gatekeeper's and the producer's letters read the same."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts import DeadLetter, decode, encode
from services.kafka.deadletters import (
    DEAD_LETTER_KEY_LIMIT,
    DEAD_LETTER_VALUE_LIMIT,
    Source,
    dead_letter,
    fitting,
    letter_key,
)
from services.kafka.sizing import RecordLimit, record_size
from services.producer.deadletter import fitted
from services.producer.sizes import RecordGuard

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 2, tzinfo=UTC)
HUGE = Source("p.dispatch.a", 2, 9, b"k" * 5000, b"v" * 200_000, [("h", b"x" * 3000)])


def test_both_services_write_the_same_letter_about_the_same_record() -> None:
    limit = 1_048_576
    gatekeeper = fitting(HUGE, "record_too_large", "too big", NOW, service="gatekeeper",
                         limit=RecordLimit(limit))
    key, value = fitted(HUGE, "record_too_large", "too big", NOW, RecordGuard.of(limit))
    producer = decode(DeadLetter, value)
    assert producer.service == "producer"
    assert producer.model_copy(update={"service": "gatekeeper"}) == gatekeeper
    assert key == letter_key(gatekeeper) == b"k" * DEAD_LETTER_KEY_LIMIT
    assert len(gatekeeper.value) == DEAD_LETTER_VALUE_LIMIT
    assert "value cut to 65536 of 200000 bytes" in gatekeeper.reason


def test_a_letter_too_big_even_cut_keeps_only_its_origin_and_reason() -> None:
    limit = RecordLimit(16_384)
    assert not limit.fits(*_record(dead_letter(HUGE, "c", "why", NOW, service="producer")))
    letter = fitting(HUGE, "c", "why", NOW, service="producer", limit=limit)
    assert (letter.value, letter.headers) == ("", None)
    assert (letter.source_topic, letter.partition, letter.offset) == ("p.dispatch.a", 2, 9)
    assert letter.reason.startswith("why (value of 200000 bytes left out")
    assert record_size(*_record(letter)) <= 16_384


def test_a_source_without_headers_has_none_in_its_letter() -> None:
    letter = dead_letter(Source("t", 0, 1, None, b"{}"), "c", "why", NOW, service="gatekeeper")
    assert (letter.key, letter.value, letter.headers, letter.reason) == (None, "{}", None, "why")


def _record(letter: DeadLetter) -> tuple[bytes | None, bytes]:
    return letter_key(letter), encode(letter)


def test_a_null_header_value_is_kept_as_empty_text() -> None:
    source = Source("t", 0, 1, b"k", b"{}", [("agui-run-id", None), ("x", b"y")])
    letter = dead_letter(source, "c", "why", NOW, service="gatekeeper")
    assert letter.headers == {"agui-run-id": "", "x": "y"}
