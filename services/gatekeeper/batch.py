"""One partition's work between two transactions, decided in memory.

The commit path (``commit.prepare``) feeds a ``Batch`` the records it fetched for one partition:
run boundaries from ``runs`` first, then ``requests``. Boundaries first is
safe because an event can only belong to a run admitted in an *earlier*
transaction, and it spares a resume sent right after its interrupt arrived a
spurious ``thread_busy``. The batch collects what the transaction must
write: decisions, dispatches, dead letters and the latest state of every
thread it changed. Nothing here touches Kafka, the clock or a random
source: ``now`` and the entropy for new trace ids are passed in, and the
committed states it reads are only replaced after the commit.

Nothing the gatekeeper writes may outgrow a record: a record the broker
refuses fails the whole transaction, again on every retry, and would stall
the partition for every thread on it. So every output is encoded as it is
decided and measured as the broker measures it (``RecordLimit``: key, value
and headers): a request whose dispatch or new thread state would not fit is
rejected ``invalid_input`` instead, leaving the thread as it was; a request
whose very decision would not fit (a 400,000-character threadId is its key
and part of its value) is dead-lettered ``record_too_large``, and nothing
else is written for it; a run boundary whose new thread state would not fit
is dead-lettered too, and its run closed as failed (``Boundary.failed``),
so the thread is never left running; dead letters are cut to fit
(``services.kafka.deadletters``). The encodings are kept and written as
they are. What still slips past (a broker whose limit is below the
configured one) is named by the broker's refusal; its inputs come back
as ``poison`` (``refusals``),
and the next batch dead-letters them instead of deciding them again.

Events other than ``RUN_STARTED`` / ``RUN_FINISHED`` / ``RUN_ERROR`` are
skipped on their type header without decoding; the boundaries, two per run,
are decoded and checked (``thread.read_boundary``). A boundary event that
cannot be used (no key, a key that is not UTF-8, missing headers, a value
that is not that event, or names another thread or run than its key and
header) is dead-lettered ``invalid_event`` rather than guessed at: the thread
stays as it was, which never admits anything early, and a start no worker
wrote never holds the thread running. A request found on another partition
than its thread's (``placement``) is dead-lettered ``misrouted``: this
partition holds none of that thread's state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson
from ag_ui.core import EventType

from contracts import (
    DeadLetter,
    Decision,
    Dispatch,
    EventHeaders,
    ThreadState,
    header_value,
)
from contracts.headers import EVENT_TYPE, TRACEPARENT
from contracts.limits import InputLimits, outcome_limits
from services.gatekeeper import wire
from services.gatekeeper.intake import (
    DEFAULT_LIMITS,
    Refused,
    Unreadable,
    read_request,
    refusal,
)
from services.gatekeeper.placement import MISROUTED, misrouted
from services.gatekeeper.rules import Outcome, Policy, decide, on_boundary
from services.gatekeeper.thread import BOUNDARY_TYPES, Boundary, fresh, read_boundary
from services.kafka.deadletters import InRecord, fitting
from services.kafka.sizing import RecordLimit
from services.runtime.tracing import Entropy, next_hop_bytes

__all__ = ["Batch", "Decided", "Limits", "Poison"]

TOO_LARGE = "record_too_large"
"""The dead-letter code of an input whose outputs cannot be written."""

Source = tuple[str, int, int]
"""The input an output was made from: its topic, partition and offset."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What a batch must respect: the record limit, the input limits, the agents."""

    record: RecordLimit
    input: InputLimits = DEFAULT_LIMITS
    agents: frozenset[str] | None = None
    """The agents that have a dispatch topic (None: any)."""
    partitions: int | None = None
    """How many partitions a thread is hashed among (``partitioning.hashed_among``): a
    request on another partition than its thread's is ``misrouted``; None: not checked."""

    @property
    def max_bytes(self) -> int:
        return self.record.max_bytes

    def with_agents(self, agents: frozenset[str] | None) -> Limits:
        """These limits for ``agents`` (the same object when they are the same)."""
        return self if agents == self.agents else replace(self, agents=agents)

    def with_partitions(self, partitions: int | None) -> Limits:
        """These limits for threads hashed among ``partitions`` (the same object when
        unchanged)."""
        return self if partitions == self.partitions else replace(self, partitions=partitions)


@dataclass(frozen=True, slots=True)
class Poison:
    """An input whose outputs the broker refused: dead-letter it instead of deciding it.

    ``level`` 1: dead-lettered, a boundary closing its run as failed; 2 (its
    outputs were refused again): dead-lettered with nothing else written.
    """

    reason: str
    level: int = 1


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
    decision_value: bytes | None = None
    """The decision's record value, encoded (and measured) as it was decided."""
    source: Source | None = None
    """The input record this decision answers (a request, or the boundary that drained it)."""


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
    adopted: list[tuple[str, str, Source]] = field(default_factory=list)
    """(threadId, runId, where its start was read) of runs started on an idle thread
    without this gatekeeper's admission (``thread``: the thread counts them as running, so
    nothing is admitted beside a run that bypassed it; logged, as no worker may ever end
    one that was never dispatched)."""
    encoded: dict[str, bytes] = field(default_factory=dict)
    """threadId → the record value of ``states[threadId]``, when it is already encoded."""
    traces: dict[tuple[str, str], bytes] = field(default_factory=dict)
    """(threadId, requestId) → the hop of the first record of that request read in
    this batch: a queued request admitted when a run closes continues its trace."""
    poison: Mapping[Source, Poison] = field(default_factory=dict)
    """Inputs to dead-letter instead of deciding (their outputs were refused)."""
    changed_by: dict[str, Source] = field(default_factory=dict)
    """threadId → the last input that changed ``states[threadId]``."""
    entropy: Entropy = field(kw_only=True)
    """Random bytes for new span and trace ids (``os.urandom`` in the processor): passed
    in, so the batch stays pure and a test can pin the ids it writes."""

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
        """Apply one ``runs`` record (the same as on ``events``; a no-op unless it is a
        run boundary)."""
        kind = header_value(record.headers, EVENT_TYPE)
        if kind not in BOUNDARY_TYPES:
            return
        source = (record.topic, record.partition, record.offset)
        poisoned = self.poison.get(source)
        if poisoned is not None and poisoned.level > 1:
            self._dead(record, TOO_LARGE, poisoned.reason, minimal=True)
            return
        read = self._boundary(kind, record)
        if read is None:
            return
        thread_id, boundary = read
        before = self.state(thread_id)
        why = None if poisoned is None else poisoned.reason
        if why is not None:
            boundary = boundary.failed()
        after, outcomes = on_boundary(before, boundary, self.now, self.policy, self._admissible)
        value = self._state_value(thread_id, before, after)
        if isinstance(value, str) and why is None:
            why = value
            after, outcomes = on_boundary(before, boundary.failed(), self.now, self.policy,
                                          self._admissible)
            value = self._state_value(thread_id, before, after)
        if why is not None:
            self._dead(record, TOO_LARGE, f"{why}; the run is recorded as failed")
        if isinstance(value, str):  # not even closed as failed: the thread stays as it was
            return
        if value is not None:
            self._install(thread_id, after, value, source)
            if before.status == "idle" and after.status == "running":
                self.adopted.append((thread_id, boundary.run_id, source))
        for outcome in outcomes:  # queued requests decided now: traced as queued
            trace = self.traces.get((thread_id, outcome.decision.request_id))
            decided = Decided(outcome.decision, outcome.dispatch, trace=trace, source=source)
            self.decided.append(self._encoded(decided))

    def request(self, record: InRecord) -> None:
        """Decide one ``requests`` record."""
        source = (record.topic, record.partition, record.offset)
        poisoned = self.poison.get(source)
        if poisoned is not None:
            self._dead(record, TOO_LARGE, poisoned.reason, minimal=poisoned.level > 1)
            return
        read = read_request(
            record.key,
            record.value,
            self.now,
            max_bytes=self.limits.max_bytes,
            agents=self.limits.agents,
            limits=self.limits.input,
        )
        if isinstance(read, Unreadable):
            self._dead(record, read.code, read.reason)
            return
        trace = next_hop_bytes(_header(record.headers, TRACEPARENT), self.entropy)
        if isinstance(read, Refused):
            self._decide(record, Decided(read.decision, trace=trace, source=source))
            return
        request = read.request
        thread_id = request.input.thread_id
        astray = (misrouted(thread_id, record.partition, self.limits.partitions)
                  if self.limits.partitions is not None else None)
        if astray is not None:
            self._dead(record, MISROUTED, astray)
            return
        self.traces.setdefault((thread_id, request.request_id), trace)
        before = self.state(thread_id)
        outcome = decide(before, request, self.now, self.policy)
        state_value = self._state_value(thread_id, before, outcome.state)
        dispatch_value = (
            wire.dispatch(outcome.dispatch, read.raw) if outcome.dispatch is not None else None
        )
        oversize = (
            state_value if isinstance(state_value, str)
            else self._dispatch_too_large(thread_id, dispatch_value, trace)
        )
        if oversize is not None:
            message = f"{outcome.decision.verdict}, but {oversize}; send a smaller input"
            rejected = refusal(request, "invalid_input", message, self.now)
            self._decide(record, Decided(rejected, trace=trace,
                                         submitted_at=request.submitted_at, source=source))
            return
        raw = read.raw if outcome.dispatch is not None else None
        decided = Decided(outcome.decision, outcome.dispatch, raw, trace, request.submitted_at,
                          dispatch_value, source=source)
        if self._decide(record, decided) and isinstance(state_value, bytes):
            self._install(thread_id, outcome.state, state_value, source)

    def _decide(self, record: InRecord, decided: Decided) -> bool:
        """Keep ``decided`` when its decision fits a record; else dead-letter ``record``."""
        encoded = self._encoded(decided)
        value = encoded.decision_value
        size = self.limits.record.excess(_key(decided.decision.thread_id), value,
                                         trace_headers(decided.trace))
        if size is not None:
            self._dead(record, TOO_LARGE, self.limits.record.why(
                f"its {decided.decision.verdict} decision", size) + "; nothing was decided")
            return False
        self.decided.append(encoded)
        return True

    def _encoded(self, decided: Decided) -> Decided:
        return replace(decided, decision_value=wire.decision(decided.decision))

    def _install(self, thread_id: str, state: ThreadState, value: bytes, source: Source) -> None:
        self.states[thread_id] = state
        self.encoded[thread_id] = value
        self.changed_by[thread_id] = source

    def _state_value(
        self, thread_id: str, before: ThreadState, after: ThreadState
    ) -> bytes | str | None:
        """``after``'s record value; None when unchanged; why, when it would not fit."""
        if after is before:
            return None
        try:
            value = wire.state(after)
        except orjson.JSONEncodeError as exc:  # e.g. nested deeper than orjson writes
            return f"the thread's state cannot be written ({exc})"
        size = self.limits.record.excess(thread_id.encode(), value)
        if size is None:
            return value
        return self.limits.record.why("the thread's state", size)

    def _dispatch_too_large(
        self, thread_id: str, value: bytes | None, trace: bytes | None
    ) -> str | None:
        if value is None:
            return None
        size = self.limits.record.excess(thread_id.encode(), value, trace_headers(trace))
        return None if size is None else self.limits.record.why("its dispatch", size)

    def _admissible(self, outcome: Outcome) -> str | None:
        """``rules.Check``: why a queued request's admission cannot be written."""
        if outcome.dispatch is None:
            return None
        trace = self.traces.get((outcome.state.thread_id, outcome.decision.request_id))
        why = self._dispatch_too_large(outcome.state.thread_id,
                                       wire.dispatch(outcome.dispatch, None), trace)
        return None if why is None else f"admitted, but {why}; send a smaller input"

    def _dead(self, record: InRecord, code: str, reason: str, *, minimal: bool = False) -> None:
        """Dead-letter ``record``; cut to its origin and reason when even the cut one is too big."""
        self.dead_letters.append(fitting(record, code, reason, self.now, service="gatekeeper",
                                         limit=self.limits.record, minimal=minimal))

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
            self._dead(record, code, reason)
            return None
        try:
            thread_id = record.key.decode("utf-8")
        except UnicodeDecodeError:  # no thread's key: a lossy decode could name a real one
            self._dead(record, "event_key_not_utf8",
                       f"{kind} record's key is not UTF-8, so it names no thread")
            return None
        boundary = read_boundary(kind, thread_id, headers, record.value)
        if isinstance(boundary, str):
            self._dead(record, "invalid_event", f"{boundary}; the thread stays as it was")
            return None
        if kind != EventType.RUN_FINISHED.value:
            return thread_id, boundary
        broken = outcome_limits(record.value or b"", self.limits.input)
        if broken is not None:  # it did end the run: closed as failed, nothing left open
            reason = f"RUN_FINISHED breaks a limit ({broken.detail}); the run is recorded as failed"
            self._dead(record, "invalid_event", reason)
            return thread_id, boundary.failed()
        return thread_id, boundary


def _header(headers: Sequence[tuple[str, bytes]], name: str) -> bytes | None:
    return next((v for k, v in headers if k == name), None)


def _key(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def trace_headers(value: bytes | None) -> list[tuple[str, bytes]] | None:
    """The headers a decision or dispatch carries: its ``traceparent``, when it has one."""
    return [(TRACEPARENT, value)] if value is not None else None
