"""What a run may write: records the broker takes, interrupts a thread can hold — pure.

A record the broker refuses fails its send, and the producer used to die
of it (issue 13, finding 2): a run whose checkpoint grew past the broker's
limit stopped the worker, and every worker that took the partition over.
So every record the producer writes is measured here first, the way the
broker counts it (key, value and headers: ``services.kafka.sizing``), and
one that would not fit ends its run with a ``RUN_ERROR`` saying so instead
of being sent:

* ``RecordGuard.check`` — the one check before every send: event records
  (``publish.RunWriter``, ``publish.send_event``), checkpoint records
  (``store.CheckpointStore``), dead letters; it raises
  ``RecordTooLargeError`` carrying the ``RUN_ERROR`` code;
  ``RecordGuard.refused_by_broker`` is the same error for a record the check
  passed and the broker refused anyway (a topic's ``max.message.bytes``
  lowered under ``AGUI_MAX_RECORD_BYTES`` while the services run);
* ``RunLimits.event_room`` — how many value bytes an event of one run may
  have, computed once per run with the largest headers the run's records
  carry, so the runner refuses an agent's oversized event (``event_too_large``)
  before its bookkeeping counts it, with one comparison per event;
* ``interrupt_failure`` — an interrupt outcome must fit a quarter of a
  record (the gatekeeper keeps the open interrupts in a thread state next to
  the rest of the thread: ``interrupts_too_large``), and its ids must be
  ids (``AGUI_MAX_ID_LENGTH``: ``invalid_interrupt``);
* ``limited_ending`` — how a run ends once those checks are applied;
  ``send_failure`` — how it ends when a send failed anyway.

The failures these checks find close what the run left open before its
``RUN_ERROR`` (``Failed.close_open``); a failed send does not (what reached
the broker is not known record by record). No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from ag_ui.core import Interrupt

from contracts.codec import to_wire
from contracts.headers import AGENT, EVENT_TYPE, RUN_ID, SCHEMA, SEQ, TRACEPARENT
from contracts.limits import InputLimits, interrupt_limits, json_depth_exceeded
from services.kafka.size_refusals import TOO_LARGE, broker_refusal
from services.kafka.sizing import Headers, RecordLimit, record_size
from services.producer.bookkeeping import Completed, Ending, Failed, RunBook
from services.producer.errors import RecordTooLargeError

DEFAULT_MAX_RECORD_BYTES = 1_048_576
"""``AGUI_MAX_RECORD_BYTES``'s default (the runner's, when no settings are given)."""
INTERRUPT_SHARE = 4
"""An interrupt outcome may take ``max_record_bytes // INTERRUPT_SHARE`` bytes."""
MESSAGE_TOO_LARGE = 10
"""Kafka's error code for a record over the broker's or topic's limit."""
CLOSE_FIRST = frozenset({"event_too_large", "interrupts_too_large", "invalid_interrupt",
                         "checkpoint_too_large"})
"""Failures found by these checks: the run closes what it opened before its RUN_ERROR."""

_LONGEST_TYPE = b"X" * 40
"""Longer than any AG-UI event type name (the longest has 27 characters)."""
_LONGEST_SEQ = b"9" * 20
_TRACEPARENT = b"0" * 55
_VARINT_SLACK = 8
"""A value's length is a varint: the room computed with an empty value is off by < 5."""


@dataclass(frozen=True, slots=True)
class RecordGuard:
    """The producer's one check of every record before it is sent."""

    limit: RecordLimit

    @classmethod
    def of(cls, max_record_bytes: int) -> RecordGuard:
        return cls(RecordLimit(max_record_bytes))

    def check(self, what: str, code: str, key: bytes | None, value: bytes | None,
              headers: Headers | None = None) -> None:
        """Raise ``RecordTooLargeError`` (``code``) when the record would not fit."""
        size = self.limit.excess(key, value, headers)
        if size is not None:
            raise self.refused(what, code, size)

    def refused(self, what: str, code: str, size: int) -> RecordTooLargeError:
        """The error for ``what``, a record of ``size`` bytes, not fitting."""
        return RecordTooLargeError(self.limit.why(what, size), code, size)

    def refused_by_broker(self, what: str, topic: str, code: str, key: bytes | None,
                          value: bytes | None,
                          headers: Headers | None = None) -> RecordTooLargeError:
        """The error for ``what``, a record this guard let through, refused by the broker
        for its size (``topic`` takes less than the limit): the run ends with ``code``."""
        size = record_size(key, value, headers)
        return RecordTooLargeError(broker_refusal(what, topic, size, self.limit.max_bytes),
                                   code, size)


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The limits one run is held to (from ``KafkaSettings`` and ``LimitSettings``)."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    ids: InputLimits = field(default_factory=InputLimits)

    @property
    def max_interrupt_bytes(self) -> int:
        return self.max_record_bytes // INTERRUPT_SHARE

    def event_room(self, thread_id: str, run_id: str, agent: str) -> int:
        """The most value bytes an event record of this run can have and still fit.

        Counted with the largest headers the run's records carry (any event type,
        any sequence number, a traceparent), so an event within the room passes
        ``RecordGuard.check`` when it is sent.
        """
        headers = [(RUN_ID, run_id.encode()), (EVENT_TYPE, _LONGEST_TYPE),
                   (AGENT, agent.encode()), (SEQ, _LONGEST_SEQ), (SCHEMA, b"1"),
                   (TRACEPARENT, _TRACEPARENT)]
        fixed = record_size(thread_id.encode(), b"", headers)
        return self.max_record_bytes - fixed - _VARINT_SLACK

    def event_refusal(self, event_type: str, size: int, room: int) -> str:
        """Why an event of ``size`` value bytes is dropped (its RUN_ERROR's message)."""
        return (f"the agent's {event_type} event is {size} bytes; a record of this run "
                f"can carry at most {room} ({self.max_record_bytes} bytes with its key "
                "and headers, AGUI_MAX_RECORD_BYTES); the event was dropped")


def interrupt_failure(interrupts: Sequence[Interrupt], limits: RunLimits) -> Failed | None:
    """Why an interrupt outcome carrying ``interrupts`` cannot be published, or None."""
    most = limits.ids.max_resume_entries
    if len(interrupts) > most:
        return Failed(f"the run would end with {len(interrupts)} open interrupts, more than "
                      f"the {most} one resume may answer (AGUI_MAX_RESUME_ENTRIES): no run "
                      "could ever resume the thread", "interrupts_too_large", close_open=True)
    counted = dataclasses.replace(limits.ids, max_json_depth=1 << 30)  # depth: below
    crowded = json_depth_exceeded(_free_form(interrupts), counted, top=4,
                                  base="outcome/interrupts")
    if crowded is not None:  # found before pydantic writes them, which is what costs
        return Failed(f"invalid interrupt: {crowded.detail}", "invalid_interrupt",
                      close_open=True)
    outcome = {"type": "interrupt", "interrupts": [to_wire(i) for i in interrupts]}
    broken = interrupt_limits(outcome, limits.ids)
    if broken is not None and broken.code != "json_too_deep":  # the run's end says that
        # (``outcome_limits``, ``invalid_event``, as the gatekeeper would)
        return Failed(f"invalid interrupt: {broken.detail}", "invalid_interrupt",
                      close_open=True)
    size = len(orjson.dumps(outcome))
    if size > limits.max_interrupt_bytes:
        return Failed(f"the interrupt outcome ({len(interrupts)} interrupts) is {size} bytes, "
                      f"over the {limits.max_interrupt_bytes} a thread can hold "
                      f"(AGUI_MAX_RECORD_BYTES / {INTERRUPT_SHARE})", "interrupts_too_large",
                      close_open=True)
    return None


def _free_form(interrupts: Sequence[Interrupt]) -> list[Any]:
    """The free-form members of ``interrupts`` (metadata, response schema, any extra), as
    the agent gave them: pydantic writes them at about a microsecond per array."""
    return [v for i in interrupts
            for v in (i.metadata, i.response_schema, *(i.model_extra or {}).values())
            if isinstance(v, (dict, list))]


def limited_ending(ending: Ending, book: RunBook, limits: RunLimits) -> Ending:
    """``ending`` once the limits are applied: an interrupt outcome that breaks them,
    and a failure these checks found, end the run with RUN_ERROR closing what is open."""
    if isinstance(ending, Completed):
        interrupts = [*book.carried(), *book.raised()]
        if interrupts:
            return interrupt_failure(interrupts, limits) or ending
        return ending
    if isinstance(ending, Failed) and ending.code in CLOSE_FIRST and not ending.close_open:
        return dataclasses.replace(ending, close_open=True)
    return ending


def send_failure(exc: Exception) -> Failed:
    """How a run ends when one of its sends failed (nothing it left open is closed)."""
    if isinstance(exc, RecordTooLargeError):
        return Failed(exc.message, exc.code)
    if isinstance(exc, TOO_LARGE) or getattr(exc, "errno", None) == MESSAGE_TOO_LARGE:
        return Failed(f"the broker refused a record of this run as too large: {exc}",
                      "event_too_large")
    return Failed(f"a record of this run could not be published: {type(exc).__name__}"
                  + (f": {exc}" if str(exc) else ""), "publish_failed")
