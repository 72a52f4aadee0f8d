"""Header names that are not UTF-8: a record to read, not a partition lost.

Kafka's record format gives a header name as bytes. The Java client writes
UTF-8, but any client can write anything and the broker stores it as given.
aiokafka decodes header names strictly, so a single such record made every
``getmany`` over its partition raise ``UnicodeDecodeError`` for ever: every
service reading that partition stopped there, and a restart met the same
record again. ``install`` (called by ``clients``) has aiokafka's fetcher
read a batch that fails so again with the names decoded leniently (U+FFFD
for what is not UTF-8): the records before and after it in the batch are
read as usual, and the odd name is just a header no reader knows. Every
batch that decodes cleanly takes aiokafka's own (compiled) path; only the
failing one is parsed here, from its bytes, per the v2 record format.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from aiokafka import codec
from aiokafka.consumer import fetcher
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import decode_varint

log = logging.getLogger(__name__)

_LOG_OVERHEAD = 12
"""A batch's base offset (int64) and length (int32), before what the length counts."""
_HEADER = struct.Struct(">qiibIhiqqqhii")
"""A v2 batch header: base offset, length, leader epoch, magic, crc, attributes,
last offset delta, base and max timestamps, producer id and epoch, base sequence,
record count."""
_CODECS: dict[int, Callable[[bytes], bytes]] = {
    1: codec.gzip_decode, 2: codec.snappy_decode, 3: codec.lz4_decode, 4: codec.zstd_decode}


class LenientRecord(NamedTuple):
    """One record as aiokafka's fetcher reads it (``PartitionRecords._consumer_record``)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    checksum: None = None


def lenient_records(raw: bytes) -> list[LenientRecord]:
    """Every record of one v2 batch ``raw`` (its whole bytes), header names decoded with
    U+FFFD for what is not UTF-8. The CRC is aiokafka's to check before."""
    (base_offset, _, _, magic, _, attributes, _, base_ts, max_ts, _, _, _,
     count) = _HEADER.unpack_from(raw)
    if magic != 2:
        raise ValueError(f"a batch of magic {magic}: only v2 carries headers")
    body = raw[_HEADER.size:]
    compression = attributes & 0x07
    if compression:
        body = _CODECS[compression](body)
    log_append_time = bool(attributes & 0x08)
    buf = bytearray(body)
    out, pos = [], 0
    for _ in range(count):
        _, pos = decode_varint(buf, pos)  # the record's length
        pos += 1  # its attributes: unused
        ts_delta, pos = decode_varint(buf, pos)
        offset_delta, pos = decode_varint(buf, pos)
        key, pos = _bytes(buf, pos)
        value, pos = _bytes(buf, pos)
        n, pos = decode_varint(buf, pos)
        headers = []
        for _ in range(n):
            name, pos = _bytes(buf, pos)
            header, pos = _bytes(buf, pos)
            headers.append(((name or b"").decode("utf-8", "replace"), header))
        out.append(LenientRecord(base_offset + offset_delta,
                                 max_ts if log_append_time else base_ts + ts_delta,
                                 int(log_append_time), key, value, headers))
    return out


def _bytes(buf: bytearray, pos: int) -> tuple[bytes | None, int]:
    size, pos = decode_varint(buf, pos)
    if size < 0:
        return None, pos
    return bytes(buf[pos:pos + size]), pos + size


class _Batch:
    """aiokafka's batch, iterated leniently if its own iteration cannot decode it."""

    __slots__ = ("_batch", "_data", "_end", "_start")

    def __init__(self, batch: Any, data: bytes, start: int, end: int) -> None:
        self._batch = batch
        self._data = data
        self._start = start
        self._end = end

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __iter__(self) -> Iterator[Any]:
        try:
            return iter(list(self._batch))
        except UnicodeDecodeError:
            records = lenient_records(bytes(self._data[self._start:self._end]))
            log.warning("a record batch at offset %d holds a header name that is not "
                        "UTF-8: read with it replaced", records[0].offset if records else -1)
            return iter(records)

    def __next__(self) -> Any:  # a control batch's one record (aiokafka reads it so)
        return next(self._batch)


class _Records:
    """``MemoryRecords`` over one fetch response, handing out ``_Batch`` es."""

    __slots__ = ("_data", "_pos", "_records")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0
        self._records = MemoryRecords(data)

    def has_next(self) -> bool:
        return bool(self._records.has_next())

    def next_batch(self) -> Any:
        batch = self._records.next_batch()
        if batch is None:
            return None
        start = self._pos
        (length,) = struct.unpack_from(">i", self._data, start + 8)
        self._pos = start + _LOG_OVERHEAD + length
        return _Batch(batch, self._data, start, self._pos)

    def size_in_bytes(self) -> int:
        return int(self._records.size_in_bytes())


def install() -> None:
    """Have aiokafka's fetcher read every fetched partition through ``_Records``."""
    if getattr(fetcher, "MemoryRecords", None) is not _Records:
        fetcher.MemoryRecords = _Records
