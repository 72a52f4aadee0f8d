"""What a run is made of on its way out: numbered records, its report, its sink, its options.

The runner (``services.producer.runner``) turns an agent's events into
``EventRecord`` values and hands them to a ``RunSink`` — the worker's
publishes them to ``events`` (``execution.KafkaRunSink``), the unit tests'
keeps them in a list. The sink also says whether a run's end can be made
durable (``refusal``: its terminal record, the checkpoint that closes it)
before the terminal event is published, so a run never ends in a way its
worker could not record. ``RunOptions`` is how runs behave, from the
worker's settings.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from ag_ui.core import Interrupt

from services.producer.bookkeeping import Failed, Outcome
from services.producer.sizes import RunLimits

UncoveredPolicy = Literal["reject", "reinterrupt"]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class EventRecord:
    """One validated event, numbered, in its exact wire bytes (not changed once made;
    not frozen, because a frozen dataclass costs three times as much to build, per event).

    It keeps no model of the event: thousands of records wait in the runs' queues, and
    each model would be three more objects for the garbage collector to scan.
    """

    seq: int
    value: bytes
    event_type: str
    """The wire ``type`` (what the record's headers carry)."""


@dataclass(frozen=True, slots=True)
class RunReport:
    """How a run ended, for the worker's checkpoint."""

    outcome: Outcome
    terminal: EventRecord
    open_interrupts: tuple[Interrupt, ...]
    """Interrupts open on the thread once this run closed."""
    events: int


class RunSink(Protocol):
    """Where a run's records go (the worker publishes them to ``events``)."""

    async def send(self, record: EventRecord) -> None:
        """Publish one record, in order (may return before it is acknowledged)."""

    async def send_terminal(self, record: EventRecord, report: RunReport) -> None:
        """Publish the terminal record and return once it is durable."""

    def refusal(self, report: RunReport) -> Failed | None:
        """Why the run cannot end as ``report`` says (its terminal record or the
        checkpoint recording it would not fit), or None; the run then ends with
        the RUN_ERROR returned."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How runs behave (from the worker's settings)."""

    uncovered_policy: UncoveredPolicy = "reinterrupt"
    cancel_grace_s: float = 2.0
    """How long a cancelled agent may take to stop before it is abandoned."""
    queue_limit: int = 256
    """Admitted-but-unpublished events before the agent is held at its next emit."""
    clock: Callable[[], datetime] = utc_now
    clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
    """Event timestamps (ms since the epoch); separate because it runs per event."""
    limits: RunLimits = field(default_factory=RunLimits)
    """Record sizes and ids (``AGUI_MAX_RECORD_BYTES``, ``AGUI_MAX_ID_LENGTH``)."""
    interrupt_ttl: timedelta | None = None
    """The default TTL stamped on interrupts raised without ``expiresAt`` (``ttl``)."""
