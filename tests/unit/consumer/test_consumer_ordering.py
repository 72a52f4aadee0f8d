"""The per-run sequencer and the SSE framing: order restored, duplicates gone, frames intact."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.consumer.ordering import (
    KEEPALIVE,
    Sequencer,
    data_frame,
    parse_last_event_id,
    sse_value,
)

pytestmark = pytest.mark.unit


def feed(seqs: list[int], *, after: int | None = None, window: int = 256) -> list[int]:
    sequencer: Sequencer[str] = Sequencer(after=after, window=window)
    out = []
    for seq in seqs:
        out += [s for s, _ in sequencer.offer(seq, f"e{seq}")]
    out += [s for s, _ in sequencer.release()]
    return out


def test_in_order_records_pass_straight_through() -> None:
    sequencer: Sequencer[str] = Sequencer()
    assert sequencer.offer(0, "a") == [(0, "a")]
    assert sequencer.offer(1, "b") == [(1, "b")]
    assert not sequencer.waiting


def test_duplicates_and_stale_records_are_dropped() -> None:
    assert feed([0, 1, 1, 0, 2, 2]) == [0, 1, 2]


def test_a_record_ahead_of_a_gap_waits_for_it() -> None:
    sequencer: Sequencer[str] = Sequencer(after=0)
    assert sequencer.offer(2, "c") == []
    assert sequencer.waiting
    assert sequencer.offer(1, "b") == [(1, "b"), (2, "c")]
    assert not sequencer.waiting


def test_release_gives_up_on_a_gap_and_goes_on_from_there() -> None:
    sequencer: Sequencer[str] = Sequencer(after=0)
    sequencer.offer(3, "d")
    sequencer.offer(5, "f")
    assert sequencer.release() == [(3, "d"), (5, "f")]
    assert sequencer.offer(4, "e") == []  # older than what was delivered
    assert sequencer.offer(6, "g") == [(6, "g")]


def test_a_full_window_releases_itself() -> None:
    assert feed([0, 5, 6, 7], window=2) == [0, 5, 6, 7]


def test_last_event_id_skips_what_the_client_has() -> None:
    assert feed([0, 1, 2, 3], after=1) == [2, 3]


@given(st.permutations(list(range(40))))
def test_any_arrival_order_is_delivered_in_sequence_order(order: list[int]) -> None:
    sequencer: Sequencer[int] = Sequencer(after=-1)
    out = []
    for seq in order:
        out += [s for s, _ in sequencer.offer(seq, seq)]
    assert out == list(range(40))


@given(st.lists(st.integers(0, 60), max_size=120), st.integers(1, 300))
def test_output_is_strictly_increasing_whatever_arrives(seqs: list[int], window: int) -> None:
    out = feed(seqs, window=window)
    assert all(a < b for a, b in itertools.pairwise(out))
    assert set(out) <= set(seqs)


@given(st.lists(st.lists(st.integers(-1, 40), max_size=30), max_size=6),
       st.one_of(st.none(), st.integers(-1, 5)), st.integers(1, 50))
def test_offering_a_batch_is_offering_each_in_turn(batches: list[list[int]], after: int | None,
                                                   window: int) -> None:
    one: Sequencer[str] = Sequencer(after=after, window=window)
    many: Sequencer[str] = Sequencer(after=after, window=window)
    for batch in batches:
        expected = [x for seq in batch for x in one.offer(seq, f"e{seq}")]
        assert many.offer_all((seq, f"e{seq}") for seq in batch) == expected
        assert (many.after, many.waiting) == (one.after, one.waiting)
    assert many.release() == one.release()


def test_data_frame_keeps_the_producers_bytes() -> None:
    value = b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}'
    assert data_frame(value, 7) == b"id: 7\ndata: " + value + b"\n\n"
    assert data_frame(value) == b"data: " + value + b"\n\n"


@pytest.mark.parametrize("value", [
    b"", b"not json", b"\xff\xfe", b"\xff\nnot json", b"[1, 2]", b'"text"', b"null",
    b'{"type": "RUN_STARTED"', b'{"a": 1}\n{"b": 2}', b"{}}\n",
], ids=["empty", "text", "not-utf8", "broken-line", "array", "string", "null", "cut",
        "two-objects", "trailing"])
def test_a_value_that_is_not_one_json_object_cannot_be_framed(value: bytes) -> None:
    assert sse_value(value) is None
    with pytest.raises(ValueError, match="not a JSON object"):
        data_frame(value)


@given(st.dictionaries(st.text(), st.text() | st.integers(-(2**63), 2**63 - 1) | st.none(),
                       max_size=5))
def test_every_json_object_is_framed_as_the_same_object_on_one_line(doc: dict[str, object]
                                                                     ) -> None:
    for value in (orjson.dumps(doc), orjson.dumps(doc, option=orjson.OPT_INDENT_2),
                  b" " + orjson.dumps(doc) + b"\r\n"):
        line = sse_value(value)
        assert line is not None
        assert b"\n" not in line
        assert b"\r" not in line
        assert orjson.loads(line) == doc


def test_a_value_shaped_as_one_object_on_one_line_is_sent_as_it_is() -> None:
    """Not parsed: what the producer writes has that shape, and parsing every event would
    cost more than framing it. Only the shape is checked (a foreign "{}}" passes)."""
    for value in (b"{}}", b'{"type":"TEXT_MESSAGE_CONTENT","delta":"\\n"}'):
        assert sse_value(value) is value


def test_a_value_with_line_breaks_is_compacted_into_one_data_line() -> None:
    frame = data_frame(b'{\n  "type": "RUN_STARTED",\r\n  "threadId": "t", "runId": "r"\n}', 1)
    lines = frame.split(b"\n")
    assert lines[0] == b"id: 1"
    assert lines[1].startswith(b"data: ")
    assert orjson.loads(lines[1][6:]) == {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
    assert frame.endswith(b"\n\n")
    assert frame.count(b"\n") == 3


def test_keepalive_is_an_sse_comment() -> None:
    assert KEEPALIVE.startswith(b":")
    assert KEEPALIVE.endswith(b"\n\n")


@pytest.mark.parametrize(("raw", "expected"), [(None, None), ("", None), (" 12 ", 12), ("-1", -1)])
def test_last_event_id_parses(raw: str | None, expected: int | None) -> None:
    assert parse_last_event_id(raw) == expected


@pytest.mark.parametrize("raw", ["abc", "1.5", "-7", "+10", "1_0", "\u0661\u0660", "- 1",
                                 "0x10", "1e3"])
def test_a_malformed_last_event_id_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match=r".+"):
        parse_last_event_id(raw)
