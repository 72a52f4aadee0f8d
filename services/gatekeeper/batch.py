"""One partition's work between two transactions, decided in memory.

The processor feeds a ``Batch`` the records it fetched for one partition:
run boundaries from ``events`` first, then ``requests``. Boundaries first is
safe because an event can only belong to a run admitted in an *earlier*
transaction, and it spares a resume sent right after its interrupt arrived a
spurious ``thread_busy``. The batch collects what the transaction must
write: decisions, dispatches, dead letters and the latest state of every
thread it changed. Nothing here touches Kafka or the clock; the committed
states it reads are only replaced by the processor after the commit.

Nothing a request makes the gatekeeper write may outgrow a record: a
dispatch is the request plus its warnings, and a thread state holds queued
requests and remembered decisions whose messages quote the request's ids.
A record the broker refuses fails the whole transaction, again on every
retry, and would stall the partition; so each request's dispatch and new
thread state are encoded as it is decided, and a request that would make
either outgrow ``Limits.max_bytes`` (less ``RECORD_OVERHEAD``) is rejected
``invalid_input`` instead, leaving the thread as it was. The encodings are
kept and written as they are.

Events other than ``RUN_STARTED`` / ``RUN_FINISHED`` / ``RUN_ERROR`` are
skipped on their type header without decoding; only ``RUN_FINISHED`` is
decoded (its outcome matters). A boundary event that cannot be used (no key,
missing headers, a body that does not validate) is dead-lettered rather than
guessed at: the thread stays as it was, which never admits anything early.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ag_ui.core import EventType, RunFinishedEvent

from contracts import (
    DeadLetter,
    Decision,
    DecodeError,
    Dispatch,
    EventHeaders,
    ThreadState,
    decode,
    header_value,
)
from contracts.headers import EVENT_TYPE, TRACEPARENT
from services.gatekeeper import wire
from services.gatekeeper.intake import Refused, Unreadable, read_request, refusal
from services.gatekeeper.rules import Outcome, Policy, decide, on_boundary
from services.gatekeeper.thread import BOUNDARY_TYPES, Boundary, fresh
from services.runtime.tracing import next_hop_bytes

SERVICE = "gatekeeper"
DEAD_LETTER_VALUE_LIMIT = 65_536
"""Bytes of a refused record kept in its dead letter (oversize records are cut)."""
RECORD_OVERHEAD = 512
"""Bytes of a record that are not its value: key, headers, framing."""


class InRecord(Protocol):
    """The parts of a consumed record the gatekeeper reads (aiokafka's ConsumerRecord)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """What a request must fit: record size, and the agents that have a dispatch topic."""

    max_bytes: int
    agents: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Decided:
    """One decision, its dispatch if admitted, and what its request record adds to them.

    Carried together, never looked up by requestId afterwards: a requestId is
    unique within its thread only, so several threads of one batch may share
    one, and each dispatch must carry its own request's input and trace.
    """

    decision: Decision
    dispatch: Dispatch | None = None
    request: dict[str, Any] | None = None
    """The admitted request's JSON object, as its record carried it (the dispatch reuses
    it); None for a request decided without its record (the dispatch is encoded)."""
    trace: bytes | None = None
    """The ``traceparent`` the decision and dispatch carry: a child of the request's
    (same trace, the gatekeeper's span), or a new trace when it had none."""
    submitted_at: datetime | None = None
    """The request's ``submittedAt`` (for the decision latency metric), when its
    record was read for this decision."""
    dispatch_value: bytes | None = None
    """The dispatch's record value, when it was encoded as the request was decided."""


@dataclass(slots=True)
class Batch:
    """The outputs of one partition's records, and the thread states they change."""

    committed: Mapping[str, ThreadState]
    now: datetime
    policy: Policy
    limits: Limits
    states: dict[str, ThreadState] = field(default_factory=dict)
    decided: list[Decided] = field(default_factory=list)
    """Every decision in order, each with what its own request record adds."""
    dead_letters: list[DeadLetter] = field(default_factory=list)
    encoded: dict[str, bytes] = field(default_factory=dict)
    """threadId → the record value of ``states[threadId]``, when it is already encoded."""
    traces: dict[tuple[str, str], bytes] = field(default_factory=dict)
    """(threadId, requestId) → the hop of the first record of that request read in
    this batch: a queued request admitted when a run closes continues its trace."""

    @property
    def has_output(self) -> bool:
        """True when the batch must be committed in a transaction (not only offsets)."""
        return bool(self.states or self.decided or self.dead_letters)

    @property
    def decisions(self) -> list[Decision]:
        """The decisions, in order."""
        return [d.decision for d in self.decided]

    @property
    def dispatches(self) -> list[Dispatch]:
        """The dispatches, in order."""
        return [d.dispatch for d in self.decided if d.dispatch is not None]

    def state(self, thread_id: str) -> ThreadState:
        """The thread as this batch leaves it so far."""
        found = self.states.get(thread_id) or self.committed.get(thread_id)
        return found if found is not None else fresh(thread_id)

    def event(self, record: InRecord) -> None:
        """Apply one ``events`` record (a no-op unless it is a run boundary)."""
        kind = header_value(record.headers, EVENT_TYPE)
        if kind not in BOUNDARY_TYPES:
            return
        read = self._boundary(kind, record)
        if read is None:
            return
        thread_id, boundary = read
        before = self.state(thread_id)
        after, outcomes = on_boundary(before, boundary, self.now, self.policy)
        if after is not before:
            self.states[thread_id] = after
            self.encoded.pop(thread_id, None)
        for outcome in outcomes:  # queued requests decided now: traced as queued
            trace = self.traces.get((thread_id, outcome.decision.request_id))
            self.decided.append(Decided(outcome.decision, outcome.dispatch, trace=trace))

    def request(self, record: InRecord) -> None:
        """Decide one ``requests`` record."""
        read = read_request(
            record.key,
            record.value,
            self.now,
            max_bytes=self.limits.max_bytes,
            agents=self.limits.agents,
        )
        if isinstance(read, Unreadable):
            self.dead_letters.append(dead_letter(record, read.code, read.reason, self.now))
            return
        trace = next_hop_bytes(_header(record.headers, TRACEPARENT))
        if isinstance(read, Refused):
            self.decided.append(Decided(read.decision, trace=trace))
            return
        request = read.request
        thread_id = request.input.thread_id
        self.traces.setdefault((thread_id, request.request_id), trace)
        before = self.state(thread_id)
        outcome = decide(before, request, self.now, self.policy)
        state_value = wire.state(outcome.state) if outcome.state is not before else None
        dispatch_value = (
            wire.dispatch(outcome.dispatch, read.raw) if outcome.dispatch is not None else None
        )
        oversize = self._oversize(outcome, state_value, dispatch_value)
        if oversize is not None:
            rejected = refusal(request, "invalid_input", oversize, self.now)
            self.decided.append(Decided(rejected, trace=trace, submitted_at=request.submitted_at))
            return
        if state_value is not None:
            self.states[thread_id] = outcome.state
            self.encoded[thread_id] = state_value
        raw = read.raw if outcome.dispatch is not None else None
        self.decided.append(
            Decided(outcome.decision, outcome.dispatch, raw, trace, request.submitted_at,
                    dispatch_value)
        )

    def _oversize(
        self, outcome: Outcome, state_value: bytes | None, dispatch_value: bytes | None
    ) -> str | None:
        """Why what ``outcome`` writes would not fit a record, or None when it fits."""
        limit = self.limits.max_bytes - RECORD_OVERHEAD
        if dispatch_value is not None and len(dispatch_value) > limit:
            return (
                f"admitted, its dispatch would be {len(dispatch_value)} bytes, over the "
                f"limit of {limit} for a record; send a smaller input"
            )
        if state_value is not None and len(state_value) > limit:
            return (
                f"{outcome.decision.verdict}, the thread's state would be {len(state_value)} "
                f"bytes, over the limit of {limit} for a record; send a smaller input"
            )
        return None

    def _boundary(self, kind: str, record: InRecord) -> tuple[str, Boundary] | None:
        """The thread and boundary a boundary record names, or None (dead-lettered)."""
        headers = EventHeaders.decode(record.headers)
        if record.key is None or headers is None:
            code, reason = (
                ("event_without_key", f"{kind} record has no key (threadId)")
                if record.key is None
                else (
                    "event_without_headers",
                    f"{kind} record lacks the agui-run-id/agui-agent/agui-seq headers",
                )
            )
            self.dead_letters.append(dead_letter(record, code, reason, self.now))
            return None
        thread_id = record.key.decode("utf-8", "replace")
        if kind != EventType.RUN_FINISHED.value:
            return thread_id, Boundary(kind, headers.run_id, headers.agent)
        try:
            event = decode(RunFinishedEvent, record.value or b"")
        except DecodeError as exc:
            reason = f"RUN_FINISHED record does not validate ({exc}); the thread stays running"
            self.dead_letters.append(dead_letter(record, "invalid_event", reason, self.now))
            return None
        return thread_id, Boundary(kind, headers.run_id, headers.agent, event.outcome)


def _header(headers: Sequence[tuple[str, bytes]], name: str) -> bytes | None:
    return next((v for k, v in headers if k == name), None)


def dead_letter(record: InRecord, code: str, reason: str, now: datetime) -> DeadLetter:
    """The dead letter for ``record``: its raw value (cut when huge), origin and reason."""
    value = record.value or b""
    if len(value) > DEAD_LETTER_VALUE_LIMIT:
        reason = f"{reason} (value cut to {DEAD_LETTER_VALUE_LIMIT} of {len(value)} bytes)"
        value = value[:DEAD_LETTER_VALUE_LIMIT]
    try:
        text, encoding = value.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(value).decode("ascii"), "base64"
    return DeadLetter(
        source_topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=record.key.decode("utf-8", "replace") if record.key is not None else None,
        value=text,
        value_encoding="utf-8" if encoding == "utf-8" else "base64",
        headers={k: v.decode("utf-8", "replace") for k, v in record.headers} or None,
        reason=reason,
        code=code,
        service=SERVICE,
        failed_at=now,
    )
