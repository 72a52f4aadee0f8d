"""One owned partition: its producer, thread states, positions and held requests.

A gatekeeper instance owns partition p of ``requests`` and ``events`` (and
restores p of ``threads``). Everything it knows about p lives here: the
transactional producer whose id names p, the committed thread states, the
offsets committed with them, how far it has read, and the requests it holds
back until ``events`` p has been read far enough (see ``processor``). This
module also turns a decided ``Batch`` into the records its transaction
writes; it does no I/O itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts import ThreadState, TopicCatalog, encode
from contracts.headers import TRACEPARENT
from services.gatekeeper.batch import Batch
from services.kafka.clients import AIOKafkaProducer, ConsumerRecord, TopicPartition
from services.kafka.transactions import OutRecord


def transactional_id(prefix: str, partition: int) -> str:
    """The transactional id of partition p's producer: the next owner fences the last."""
    return f"{prefix}.gatekeeper.p{partition}"


@dataclass(slots=True)
class Owned:
    """What this instance holds for one partition number it owns."""

    partition: int
    producer: AIOKafkaProducer
    requests: TopicPartition
    events: TopicPartition
    states: dict[str, ThreadState]
    committed_request: int
    committed_event: int
    next_request: int = 0
    """Offset after the last request record taken from the consumer."""
    next_event: int = 0
    """Offset after the last event record applied (the consumer's position)."""
    held: list[ConsumerRecord[Any, Any]] = field(default_factory=list)
    """Requests fetched but not yet decided (waiting for ``events`` to catch up)."""
    barrier: int | None = None
    """The ``events`` last stable offset the held requests wait for."""
    held_since: float | None = None
    last_commit: float = 0.0

    def __post_init__(self) -> None:
        self.next_request = self.next_request or self.committed_request
        self.next_event = self.next_event or self.committed_event

    def offsets(self) -> dict[TopicPartition, int]:
        """The next offsets to read, as a transaction commits them."""
        first_undecided = self.held[0].offset if self.held else self.next_request
        return {self.requests: first_undecided, self.events: self.next_event}

    def advanced(self) -> bool:
        """True when reading moved past what was last committed."""
        offsets = self.offsets()
        return (offsets[self.requests], offsets[self.events]) != (
            self.committed_request,
            self.committed_event,
        )

    def committed(self, offsets: dict[TopicPartition, int], batch: Batch | None) -> None:
        """Install what a successful transaction wrote."""
        if batch is not None:
            self.states.update(batch.states)
        self.committed_request = offsets[self.requests]
        self.committed_event = offsets[self.events]

    def rewound(self) -> None:
        """Back to the last commit: reading restarts there, held requests are dropped."""
        self.next_request = self.committed_request
        self.next_event = self.committed_event
        self.held = []
        self.barrier = None
        self.held_since = None


def outputs(topics: TopicCatalog, partition: int, batch: Batch) -> list[OutRecord]:
    """The records one partition's transaction writes for ``batch``.

    Decisions and dispatches carry the request's ``traceparent`` when it had
    one; thread states go to partition p of ``threads`` whatever their key
    hashes to, so restoring p finds them.
    """
    out: list[OutRecord] = []
    for d in batch.decisions:
        out.append(
            OutRecord(
                topics.decisions,
                encode(d),
                _key(d.thread_id),
                headers=_trace(batch.traces, d.request_id),
            )
        )
    for dispatch in batch.dispatches:
        out.append(
            OutRecord(
                topics.dispatch(dispatch.agent),
                encode(dispatch),
                _key(dispatch.input.thread_id),
                headers=_trace(batch.traces, dispatch.request_id),
            )
        )
    for letter in batch.dead_letters:
        out.append(OutRecord(topics.deadletter, encode(letter), _key(letter.key)))
    for thread_id, state in batch.states.items():
        out.append(OutRecord(topics.threads, encode(state), thread_id.encode(), partition))
    return out


def _key(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _trace(traces: dict[str, bytes], request_id: str) -> list[tuple[str, bytes]] | None:
    value = traces.get(request_id)
    return [(TRACEPARENT, value)] if value is not None else None
