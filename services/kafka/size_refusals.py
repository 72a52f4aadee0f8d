"""A record the broker refused for its size: named once, never sent again as it was.

Every record is measured before it is sent (``sizing``), yet the broker may
refuse one anyway (``MessageSizeTooLargeError``): a topic whose
``max.message.bytes`` is below ``AGUI_MAX_RECORD_BYTES``, a limit counted
differently. Sent again it is refused again, for ever, and the partition it
was to move past waits behind it. So a refusal steps down instead of being
retried: the gatekeeper sets aside the input whose outputs were refused
(``services.gatekeeper.refusals``, reason ``refused_reason``), and a dead
letter the broker refuses is written again smaller (``letter_after``): the
cut letter, then the minimal one (origin and reason), then none, and its
writer says loudly what it could not keep and moves on.

Pure: sizes and letters are computed, nothing is sent.
"""

from __future__ import annotations

from datetime import datetime

from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

from contracts import DeadLetter
from services.kafka.deadletters import InRecord, Service, fitting
from services.kafka.sizing import Headers, RecordLimit, record_size

__all__ = ["LETTER_REFUSALS", "TOO_LARGE", "broker_refusal", "letter_after", "refused_reason"]

TOO_LARGE = (MessageSizeTooLargeError, RecordListTooLargeError)
"""What the broker answers a record batch too large for a topic (``max.message.bytes``)."""
LETTER_REFUSALS = 2
"""Refusals after which a record's dead letter is given up: the cut one, then the minimal."""


def refused_reason(topic: str, key: bytes | None, value: bytes | None,
                   headers: Headers | None = None) -> str:
    """Why a record was set aside: its record on ``topic`` of so many bytes was refused."""
    size = record_size(key, value, headers)
    return f"its {topic} record of {size} bytes was refused by the broker as too large"


def broker_refusal(what: str, topic: str, size: int, max_record_bytes: int) -> str:
    """Why ``what``, a record of ``size`` bytes every check let through, is not on
    ``topic``: the topic takes less than ``AGUI_MAX_RECORD_BYTES`` (an operator lowered
    its ``max.message.bytes`` after the services started), and how to fix it."""
    return (f"{what}, a {size}-byte record, was refused by the broker as too large for "
            f"{topic}: the topic's max.message.bytes is under AGUI_MAX_RECORD_BYTES "
            f"({max_record_bytes}), which every record is held to; raise it to at least "
            f"{max_record_bytes} (kafka-configs --alter --entity-type topics), or lower "
            "AGUI_MAX_RECORD_BYTES")


def letter_after(record: InRecord, code: str, reason: str, now: datetime, *,
                 service: Service, limit: RecordLimit, refusals: int) -> DeadLetter | None:
    """The letter about ``record`` once the broker has refused ``refusals`` of them for their
    size: the cut letter (``fitting``), then the minimal one; None after ``LETTER_REFUSALS``."""
    if refusals >= LETTER_REFUSALS:
        return None
    return fitting(record, code, reason, now, service=service, limit=limit,
                   minimal=refusals > 0)
