"""A dead letter the broker refused for its size: smaller each time, then given up."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts import DeadLetter
from services.kafka.deadletters import Source
from services.kafka.size_refusals import (
    LETTER_REFUSALS,
    broker_refusal,
    letter_after,
    refused_reason,
)
from services.kafka.sizing import RecordLimit, record_size

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 2, tzinfo=UTC)
RECORD = Source("p.threads", 1, 7, b"t1", b"v" * 50_000, [("h", b"x")])
LIMIT = RecordLimit(1_048_576)


def _letter(refusals: int) -> DeadLetter | None:
    return letter_after(RECORD, "c", "why", NOW, service="notifier", limit=LIMIT,
                        refusals=refusals)


def test_the_cut_letter_first_then_the_minimal_then_none() -> None:
    first, second = _letter(0), _letter(1)
    assert first is not None
    assert second is not None
    assert (len(first.value), first.headers) == (50_000, {"h": "x"}), "the cut letter, whole"
    assert (second.value, second.headers) == ("", None), "origin and reason only"
    assert (second.source_topic, second.partition, second.offset) == ("p.threads", 1, 7)
    assert second.reason.startswith("why (value of 50000 bytes left out")
    assert [_letter(n) for n in range(LETTER_REFUSALS, LETTER_REFUSALS + 3)] == [None] * 3, \
        "never sent again as it was: the caller gives up and moves on"


def test_the_reason_names_the_topic_and_the_size_the_broker_refused() -> None:
    size = record_size(b"k", b"v" * 9000)
    assert refused_reason("p.deadletter", b"k", b"v" * 9000) == (
        f"its p.deadletter record of {size} bytes was refused by the broker as too large")


def test_a_broker_refusal_names_the_record_the_topic_and_the_settings() -> None:
    why = broker_refusal("the run's TEXT_MESSAGE_CONTENT #2", "p.events", 10_123, 1_048_576)
    assert why.startswith("the run's TEXT_MESSAGE_CONTENT #2, a 10123-byte record, was "
                          "refused by the broker as too large for p.events")
    assert "max.message.bytes" in why
    assert "AGUI_MAX_RECORD_BYTES (1048576)" in why
