"""Record batches read leniently: the same records as aiokafka's reader, odd header names kept.

``lenient_records`` parses a v2 batch from its bytes only when aiokafka's own
reader raised on a header name that is not UTF-8; on any batch both can
read, it must give what aiokafka gives. And aiokafka's fetcher, reading a
fetch response through ``_Records``, must hand out every record of every
batch in offset order, the odd one included.
"""

from __future__ import annotations

import struct

import pytest
from aiokafka.consumer.fetcher import PartitionRecords
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from services.kafka.lenient_records import _Records, lenient_records

pytestmark = pytest.mark.unit

ODD = b"\xff\xfeodd"
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def batch(records: list[Record], *, base: int = 0, compression: int = 0,
          odd: int | None = None) -> bytes:
    """A v2 batch of ``records`` at offset ``base``; record ``odd`` gets a header named
    ``ODD`` (not UTF-8), written as a raw client could."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression,
                                        is_transactional=0, producer_id=-1, producer_epoch=-1,
                                        base_sequence=-1, batch_size=1 << 24)
    placeholder = "Q" * len(ODD)
    for i, (key, value, headers) in enumerate(records):
        extra = [(placeholder, b"odd")] if i == odd else []
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value,
                       headers=[*headers, *extra])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base)
    if odd is not None:
        assert compression == 0, "the placeholder is found in uncompressed bytes only"
        at = raw.find(placeholder.encode())
        raw[at:at + len(ODD)] = ODD
        struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


def as_tuples(records: object) -> list[tuple[object, ...]]:
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, list(r.headers))
            for r in records]  # type: ignore[attr-defined]


blob = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(max_size=12), blob)
records = st.lists(st.tuples(blob, blob, st.lists(header, max_size=4)), min_size=1, max_size=12)


@given(records, st.sampled_from([0, 1]), st.integers(0, 1 << 40))
def test_any_batch_reads_as_aiokafka_reads_it(rs: list[Record], compression: int,
                                              base: int) -> None:
    raw = batch(rs, base=base, compression=compression)  # 1: gzip
    assert as_tuples(lenient_records(raw)) == as_tuples(DefaultRecordBatch(raw))


def test_a_name_that_is_not_utf8_is_replaced_and_the_rest_kept() -> None:
    rs: list[Record] = [(b"k", b"a", [("h", b"1")]), (b"k", b"b", [("h", None)]),
                        (None, b"c", [])]
    raw = batch(rs, base=41, odd=1)
    with pytest.raises(UnicodeDecodeError):
        list(DefaultRecordBatch(raw))
    read = lenient_records(raw)
    assert [(r.offset, r.key, r.value) for r in read] == [(41, b"k", b"a"), (42, b"k", b"b"),
                                                          (43, None, b"c")]
    assert read[1].headers == [("h", None), ("\ufffd\ufffdodd", b"odd")]
    assert read[0].headers == [("h", b"1")]


def test_the_fetcher_hands_out_every_record_of_every_batch_in_order() -> None:
    rs: list[Record] = [(b"k", b"v%d" % i, [("h", b"x")]) for i in range(3)]
    response = batch(rs, base=0) + batch(rs, base=3, odd=1) + batch(rs, base=6)
    tp = TopicPartition("t", 0)
    fetched = PartitionRecords(tp, _Records(response), [], 0, None, None, True,
                               "read_committed")
    got = list(fetched)
    assert [r.offset for r in got] == list(range(9))
    assert [r.value for r in got] == [b"v0", b"v1", b"v2"] * 3
    assert ("\ufffd\ufffdodd", b"odd") in got[4].headers
    assert fetched.next_fetch_offset == 9


def test_a_truncated_last_batch_is_left_for_the_next_fetch() -> None:
    rs: list[Record] = [(b"k", b"v", [])]
    whole = batch(rs, base=0)
    fetched = _Records(whole + batch(rs, base=1)[:-3])
    assert fetched.has_next()
    assert fetched.next_batch() is not None
    assert not fetched.has_next()
    assert fetched.next_batch() is None
    assert fetched.size_in_bytes() == 2 * len(whole) - 3
