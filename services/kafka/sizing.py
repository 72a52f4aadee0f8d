"""Will the broker take this record? One answer, asked before every write.

A record the broker refuses (``MessageSizeTooLargeError``) fails the send,
and inside a transaction it fails the whole transaction, again on every
retry: one oversized output stalls its partition for every thread on it.
So every service asks ``RecordLimit.excess`` before it sends, counting what
the broker counts — key, value and headers, in a record batch of one —
and turns a record that does not fit into a rejection, a ``RUN_ERROR`` or
a dead letter instead of a retry loop.

The limit is ``AGUI_MAX_RECORD_BYTES`` (default 1,048,576 bytes), which must
not exceed the topics' ``max.message.bytes`` (Kafka's default 1,048,588) nor
the producer's ``max_request_size`` (``clients`` sets it to twice the limit).
Pure: sizes are computed from the bytes, nothing is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka.record.default_records import DefaultRecordBatchBuilder

Headers = Sequence[tuple[str, bytes]]


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None = None) -> int:
    """An upper bound of the bytes a batch holding only this record takes (uncompressed)."""
    return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(
        key, value, list(headers) if headers else []))


@dataclass(frozen=True, slots=True)
class RecordLimit:
    """The largest record batch of one record a service may write."""

    max_bytes: int

    def excess(self, key: bytes | None, value: bytes | None,
               headers: Headers | None = None) -> int | None:
        """The record's size when it is over the limit, else None."""
        size = record_size(key, value, headers)
        return size if size > self.max_bytes else None

    def fits(self, key: bytes | None, value: bytes | None,
             headers: Headers | None = None) -> bool:
        return self.excess(key, value, headers) is None

    def why(self, what: str, size: int) -> str:
        """A reason naming ``what`` did not fit (for a decision, a RUN_ERROR, a dead letter)."""
        return (f"{what} would be a {size}-byte record, over the broker's limit of "
                f"{self.max_bytes} bytes (AGUI_MAX_RECORD_BYTES)")
