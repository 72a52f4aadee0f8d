"""Delegation: an agent runs another agent as a child run, across services, through Kafka.

A subagent (``ctx.subagent``) runs inside the parent's process; a *child
run* is a separate AG-UI run of another agent, hosted by whatever workers
serve it. The parent submits a ``RunRequest`` to ``requests`` (so the
gatekeeper decides it like any run, interrupts and expiry included), with
``parentRunId`` set to its own run and its own principal (the tenant that
owns the parent owns the child), on a child thread derived from its own,
and waits for the child's decision on ``decisions`` and its terminal event
on ``events``.

The child thread is ``<thread>/<key>-<token>``, the token a digest of the
parent run's request id (a uuid the consumer service makes, carried on the
dispatch) and the key: the same for the same run after a worker restart,
and unknowable to anyone who has not seen the parent's request — thread ids
are one namespace, so a predictable child thread could be created first by
another tenant and the owner's pipeline would fail. A resumed parent run
(a new request) continues the child threads its interrupts name. A child
id that would be longer than ``AGUI_MAX_ID_LENGTH`` fails the parent run
(``child_id_too_long``) instead of being submitted, and so does a child
request whose record would not fit (``child_request_too_large``).

A child that ends interrupted cannot be answered by the parent's caller
directly — they talk to the parent. So ``carry_up`` re-raises each child
interrupt on the parent with a namespaced id (``<key>/<child id>``, unique
in the parent's run), the same reason, message, responseSchema and
expiresAt, and the child's identity in ``metadata["agui-relay.child"]``.
The parent's run ends interrupted; a person answers once, at the top. A
namespaced id longer than ``AGUI_MAX_ID_LENGTH`` could never be answered:
``call`` then cancels the child's questions in the child (a resume with
every one cancelled, followed to its end) and ``carry_up`` fails the parent
run (``child_id_too_long``, naming the interrupt), so no thread is left
waiting. When the parent is resumed, its agent runs again from the start and
calls the same ``key``: ``Delegation.call`` finds the answers addressed to
that key in ``ctx.answers`` and ``route_down`` turns them into the child's
resume list (ids un-namespaced, statuses and payloads as given), sent as the
child thread's next run with the child's accumulated messages and state
(rebuilt from its events, read from the child's first event on: a record
under the child's key that is no event of it, not a JSON object or a
tombstone, is skipped as the consumer service skips it). Cancelling an
expired interrupt at the top therefore cancels it in the child, which is how
the child thread moves past it; when the child has already moved past it (the
expiry policy cancelled it on the child thread first, or an operator did with
``--cancel-all``), nothing is sent, whatever the answers at the top, and the
child's outcome is the run that ended after it.

A finished child is not run again in the same pipeline: the first carried-up
interrupt of each ``carry_up`` names, under ``calls``, the child thread of
every other key this run called (with the run that ended and where the
child's events begin), so a resumed run's ``call`` of a key without answers
gets that child's outcome as it ended — success, error, cancelled or
still interrupted — read from the child thread, without submitting. Carry
up after the other children have ended (await them first, as in a
``TaskGroup``): a key called after it is not named and runs again.

If the parent run is cancelled while it waits, or gives up on the child
(``within_s``, or no decision), the child run is cancelled too (a
``ControlCommand`` on ``control``). Children called side by side should be
awaited in an ``asyncio.TaskGroup``, which cancels the others when one
fails (and so their child runs); ``asyncio.gather`` leaves them running
until they end or ``AGUI_RUN_TIMEOUT_S`` passes. The child's request continues
the parent run's trace (its ``traceparent`` is a child of the parent's
hop), so a pipeline is one trace. Kafka settings come from the worker's
environment (``KafkaSettings()``) unless passed in.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

import orjson
from ag_ui.core import Interrupt, ResumeEntry, RunAgentInput

from contracts import ControlCommand, Decision, DecodeError, RunRequest, decode, encode
from contracts.codec import to_wire
from contracts.headers import EVENT_TYPE, RUN_ID, SEQ, TRACEPARENT, Headers
from contracts.limits import InputLimits
from contracts.records import DELEGATION_REQUEST_PREFIX
from services.agui.transcript import replay
from services.kafka.clients import new_producer
from services.kafka.reader import Start, TopicReader
from services.producer.context import RunContext
from services.producer.errors import RunFailedError
from services.producer.sizes import RecordGuard
from services.runtime import tracing
from services.runtime.settings import KafkaSettings, LimitSettings

SEPARATOR = "/"
TOKEN_BYTES = 8
"""A child thread's token: 8 bytes of digest, 16 hex characters."""
CHILD_METADATA = "agui-relay.child"
"""The ``metadata`` member of a carried-up interrupt naming the child it came from."""
REFUSED_GRACE_S = 5.0
"""How long a refused cancellation waits for the child's run that moved past it to show."""
POLL_S = 0.5

ChildStatus = Literal["success", "interrupt", "cancelled", "error", "refused"]


class DelegationError(RuntimeError):
    """A child run could not be started or followed (no decision in time, bad key)."""


@dataclass
class ChildOutcome:
    """How a child run ended, and what it said."""

    agent: str
    thread_id: str
    run_id: str
    status: ChildStatus
    interrupts: list[Interrupt] = field(default_factory=list)
    text: str = ""
    """The assistant text the child streamed in this run."""
    result: Any = None
    error: str | None = None
    """RUN_ERROR's ``code: message``, or the rejection's ``code: message``."""
    events: list[dict[str, Any]] = field(default_factory=list)
    start: EventOffset | None = None
    """Where the child thread's events begin on its ``events`` partition, when seen."""


class EventOffset(NamedTuple):
    """A child thread's first event on ``events``: its partition and offset."""

    partition: int
    offset: int

    def to_wire(self) -> dict[str, int]:
        return {"partition": self.partition, "offset": self.offset}

    @classmethod
    def read(cls, wire: object) -> EventOffset | None:
        """The offset a carried-up interrupt names, or None when it names none readable."""
        if not isinstance(wire, dict):
            return None
        partition, offset = wire.get("partition"), wire.get("offset")
        if type(partition) is int and type(offset) is int and partition >= 0 and offset >= 0:
            return cls(partition, offset)
        return None


class ChildCall(NamedTuple):
    """A child a run called: its thread, the run that ended, where its events begin."""

    thread_id: str
    run_id: str
    start: EventOffset | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"threadId": self.thread_id, "runId": self.run_id,
                **({"from": self.start.to_wire()} if self.start else {})}


def child_token(request_id: str, key: str) -> str:
    """16 hex characters only the parent run's request id gives."""
    return hashlib.blake2b(f"{request_id}\x00{key}".encode(), digest_size=TOKEN_BYTES,
                           person=b"agui-child").hexdigest()


def child_thread_id(parent_thread_id: str, key: str, request_id: str,
                    limits: InputLimits | None = None) -> str:
    """The child's thread for ``key`` of the parent run admitted as ``request_id``."""
    check_key(key)
    return within_limit("child thread id",
                        f"{parent_thread_id}{SEPARATOR}{key}-{child_token(request_id, key)}",
                        limits or InputLimits())


def within_limit(what: str, child_id: str, limits: InputLimits) -> str:
    """``child_id``, or ``RunFailedError`` (``child_id_too_long``) when it is too long."""
    if len(child_id) > limits.max_id_length:
        raise RunFailedError(
            f"the {what} would be {len(child_id)} characters, over the {limits.max_id_length} "
            "an id may have (AGUI_MAX_ID_LENGTH): use a shorter parent id or key",
            code="child_id_too_long")
    return child_id


def check_key(key: str) -> None:
    if not key or SEPARATOR in key:
        raise DelegationError(f"delegation key {key!r} must be non-empty without {SEPARATOR!r}")


def uncarried(key: str, outcome: ChildOutcome, limits: InputLimits) -> str | None:
    """Why the child's interrupts cannot be carried up (a namespaced id too long), or None."""
    for child in outcome.interrupts:
        carried = f"{key}{SEPARATOR}{child.id}"
        if len(carried) > limits.max_id_length:
            return (f"child {key!r} asked {child.id!r}, which carried up as {carried!r} would "
                    f"be {len(carried)} characters, over the {limits.max_id_length} an id may "
                    "have (AGUI_MAX_ID_LENGTH): use a shorter key or interrupt id; the "
                    "question was cancelled in the child")
    return None


def carry_up(key: str, outcome: ChildOutcome, limits: InputLimits | None = None,
             calls: Mapping[str, ChildCall] | None = None) -> list[Interrupt]:
    """The parent's interrupts for a child's: ids namespaced, the child named in metadata
    (the first also naming ``calls``, the other children this run called), or
    ``RunFailedError`` (``child_id_too_long``) when an id would be too long."""
    why = uncarried(key, outcome, limits or InputLimits())
    if why is not None:
        raise RunFailedError(why, code="child_id_too_long")
    carried: list[Interrupt] = []
    for child in outcome.interrupts:
        metadata = dict(child.metadata or {})
        metadata[CHILD_METADATA] = {"agent": outcome.agent, "threadId": outcome.thread_id,
                                    "runId": outcome.run_id, "interruptId": child.id,
                                    **({"toolCallId": child.tool_call_id}
                                       if child.tool_call_id else {}),
                                    **({"from": outcome.start.to_wire()}
                                       if outcome.start else {}),
                                    **({"calls": {k: c.to_wire() for k, c in calls.items()}}
                                       if calls and not carried else {})}
        carried.append(Interrupt(
            id=f"{key}{SEPARATOR}{child.id}", reason=child.reason, message=child.message,
            response_schema=child.response_schema, expires_at=child.expires_at,
            metadata=metadata))
    return carried


def route_down(key: str, answers: Mapping[str, ResumeEntry]) -> list[ResumeEntry]:
    """The child's resume list: the parent's entries addressed to ``key``, ids un-namespaced."""
    prefix = f"{key}{SEPARATOR}"
    return [ResumeEntry(interrupt_id=interrupt_id[len(prefix):], status=entry.status,
                        payload=entry.payload, metadata=entry.metadata)
            for interrupt_id, entry in answers.items() if interrupt_id.startswith(prefix)]


def earlier_calls(thread_id: str, prior: Mapping[str, Interrupt]) -> dict[str, ChildCall]:
    """The children earlier runs of this pipeline called, by key, as the open (carried-up)
    interrupts name them; a child thread outside ``<thread>/<key>-`` is not followed."""
    found: dict[str, ChildCall] = {}

    def add(key: str, named: object) -> None:
        if not isinstance(named, dict):
            return
        thread, run = named.get("threadId"), named.get("runId")
        if (isinstance(thread, str) and isinstance(run, str) and key and SEPARATOR not in key
                and thread.startswith(f"{thread_id}{SEPARATOR}{key}-")):
            found.setdefault(key, ChildCall(thread, run, EventOffset.read(named.get("from"))))
    for interrupt in prior.values():  # the carried interrupt's own child first
        named = (interrupt.metadata or {}).get(CHILD_METADATA)
        if SEPARATOR in interrupt.id:
            add(interrupt.id.split(SEPARATOR, 1)[0], named)
    for interrupt in prior.values():
        named = (interrupt.metadata or {}).get(CHILD_METADATA)
        calls = named.get("calls") if isinstance(named, dict) else None
        for key, call in (calls.items() if isinstance(calls, dict) else ()):
            add(key, call)
    return found


@dataclass
class ChildHistory:
    """A child thread's events, read from its first one (each once, in order)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each run's events, by run id, in the order the runs began."""
    start: EventOffset | None = None

    def add(self, run_id: str, event: dict[str, Any], where: EventOffset) -> None:
        self.events.append(event)
        self.runs.setdefault(run_id, []).append(event)
        if self.start is None:
            self.start = where

    def ended(self, run_id: str) -> bool:
        events = self.runs.get(run_id) or [{}]
        return events[-1].get("type") in ("RUN_FINISHED", "RUN_ERROR")

    def last_ended(self) -> str | None:
        """The run that ended last (the one whose terminal event came last)."""
        ends = [i for i, e in enumerate(self.events) if e.get("type") in
                ("RUN_FINISHED", "RUN_ERROR")]
        if not ends:
            return None
        last = self.events[ends[-1]]
        return next((run for run, events in self.runs.items() if events[-1] is last), None)

    def after(self, run_id: str) -> str | None:
        """The last run begun after ``run_id`` (None: none, or ``run_id`` is not here)."""
        runs = list(self.runs)
        if run_id not in runs or runs[-1] == run_id:
            return None
        return runs[-1]


def outcome_of(agent: str, thread_id: str, run_id: str, events: Sequence[dict[str, Any]]
               ) -> ChildOutcome:
    """Read a child run's events (in order, ending with its terminal one)."""
    out = ChildOutcome(agent, thread_id, run_id, "error", events=list(events))
    out.text = "".join(str(e.get("delta", "")) for e in events
                       if e.get("type") == "TEXT_MESSAGE_CONTENT")
    terminal = events[-1] if events else {}
    if terminal.get("type") == "RUN_ERROR":
        out.error = f"{terminal.get('code') or 'error'}: {terminal.get('message')}"
        return out
    outcome = terminal.get("outcome") if isinstance(terminal.get("outcome"), dict) else {}
    assert isinstance(outcome, dict)
    kind = outcome.get("type", "success")
    if kind == "interrupt":
        out.status = "interrupt"
        out.interrupts = [Interrupt.model_validate(i) for i in outcome.get("interrupts") or []]
    elif kind == "cancelled":
        out.status = "cancelled"
    else:
        out.status = "success"
        out.result = terminal.get("result")
    return out


class ChildEvent(NamedTuple):
    """One event of a child thread's run, as read from ``events``."""

    run_id: bytes
    seq: bytes
    kind: bytes | None
    event: dict[str, Any]


def child_event(thread_id: str, key: bytes | None, value: bytes | None,
                headers: Headers | None) -> ChildEvent | None:
    """The event a record of ``thread_id`` carries, or None for any other record: anyone
    may write under a child's key, and one stray record (not JSON, a tombstone, no run id
    or sequence number) must not fail every resume of the parent, losing its answer.
    The first of each header name wins, as ``header_value`` has it."""
    if key != thread_id.encode() or value is None:
        return None
    marks = dict(reversed(headers or ()))
    run_id, seq = marks.get(RUN_ID), marks.get(SEQ)
    if run_id is None or seq is None:
        return None
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(event, dict):
        return None
    return ChildEvent(run_id, seq, marks.get(EVENT_TYPE), event)


class Delegation:
    """Child runs for one parent run (``Delegation(ctx)`` inside an agent)."""

    def __init__(self, ctx: RunContext, settings: KafkaSettings | None = None, *,
                 decision_timeout_s: float = 30.0, limits: InputLimits | None = None) -> None:
        self.ctx = ctx
        self.settings = settings or KafkaSettings()
        self.decision_timeout_s = decision_timeout_s
        self.limits = limits or LimitSettings().limits
        self.earlier = earlier_calls(ctx.thread_id, ctx.prior_interrupts)
        """The children earlier runs of this pipeline called, by key."""
        self._called: dict[str, ChildCall] = {}
        self._named: set[str] = set()
        """Keys of ``_called`` an interrupt of this run already names."""
        self._starts: dict[str, EventOffset] = {
            c.thread_id: c.start for c in self.earlier.values() if c.start is not None}

    def child_thread(self, key: str) -> str:
        """Child ``key``'s thread: the one this thread's open interrupts name for it (a
        resumed parent continues the child its earlier run started), else the one this
        run's request id gives."""
        check_key(key)
        if key in self.earlier:
            return self.earlier[key].thread_id
        if self.ctx.request_id is None:
            raise DelegationError("a child run needs its parent run's request id "
                                  "(a run started from a dispatch)")
        return child_thread_id(self.ctx.thread_id, key, self.ctx.request_id, self.limits)

    def pending_answers(self, key: str) -> list[ResumeEntry]:
        """The answers this run carries for child ``key`` (empty on a fresh run)."""
        return route_down(key, self.ctx.answers)

    async def call(self, agent: str, key: str, messages: Sequence[Mapping[str, Any]] = (), *,
                   state: Any = None, forwarded_props: Any = None,
                   within_s: float | None = None) -> ChildOutcome:
        """Run ``agent`` as child ``key``, continue it with the answers routed down, or —
        a child an earlier run of this pipeline called, with nothing to route down, or
        answers to questions it has moved past (cancelled on its own thread: the expiry
        policy, an operator's ``--cancel-all``) — read how it ended."""
        resume = self.pending_answers(key)
        earlier = self.earlier.get(key)
        outcome = None
        if earlier is not None:
            outcome = await self._as_ended(agent, earlier, moved_past=bool(resume),
                                           within_s=within_s)
        if outcome is None:
            request = await self.request(agent, key, messages, state=state,
                                         forwarded_props=forwarded_props)
            outcome = await self._submit(request, within_s)
            if outcome.status == "refused" and earlier is not None and resume:
                outcome = await self._as_ended(agent, earlier, moved_past=True,
                                               within_s=within_s,
                                               grace_s=REFUSED_GRACE_S) or outcome
        outcome.start = self._starts.get(outcome.thread_id)
        if outcome.status != "refused":
            self._called[key] = ChildCall(outcome.thread_id, outcome.run_id, outcome.start)
        why = uncarried(key, outcome, self.limits) if outcome.status == "interrupt" else None
        if why is not None:  # it could never be answered: cancelled where it was asked
            cancelling = await self._request(
                agent, key, outcome.thread_id, [ResumeEntry(interrupt_id=i.id,
                                                            status="cancelled")
                                                for i in outcome.interrupts])
            await self._submit(cancelling, within_s)
            outcome.error = f"child_id_too_long: {why}"
        return outcome

    async def request(self, agent: str, key: str, messages: Sequence[Mapping[str, Any]] = (),
                      *, state: Any = None, forwarded_props: Any = None) -> RunRequest:
        """The child's ``RunRequest`` (reading the child thread's history to continue it)."""
        return await self._request(agent, key, self.child_thread(key), self.pending_answers(key),
                                   messages, state=state, forwarded_props=forwarded_props)

    async def _request(self, agent: str, key: str, thread_id: str, resume: list[ResumeEntry],
                       messages: Sequence[Mapping[str, Any]] = (), *, state: Any = None,
                       forwarded_props: Any = None) -> RunRequest:
        run_id = within_limit("child run id", f"{self.ctx.run_id}{SEPARATOR}{key}-"
                              f"{uuid.uuid4().hex[:8]}", self.limits)
        wire: dict[str, Any] = {
            "threadId": thread_id, "runId": run_id, "parentRunId": self.ctx.run_id,
            "tools": [], "context": [], "messages": [dict(m) for m in messages],
        }
        if state is not None:
            wire["state"] = state
        if forwarded_props is not None:
            wire["forwardedProps"] = forwarded_props
        if resume:  # continue the child thread: its history, then the answers
            history = await self._history(thread_id)
            if forwarded_props is not None:
                history.pop("forwardedProps", None)
            wire.update(history)
            wire["resume"] = [to_wire(e) for e in resume]
        return RunRequest(request_id=f"{DELEGATION_REQUEST_PREFIX}{uuid.uuid4()}", agent=agent,
                          input=RunAgentInput.model_validate(wire),
                          submitted_at=datetime.now(UTC), principal=self.ctx.principal,
                          policy="delegation")

    def carry_up(self, key: str, outcome: ChildOutcome) -> list[Interrupt]:
        """Raise the child's interrupts on this run (namespaced); the run ends interrupted.

        The first also names the other children this run called and no interrupt of it
        names yet (a resume reads how they ended instead of running them again); one
        still open from an earlier run (a child left unanswered) is carried as it was.
        ``RunFailedError`` (``child_id_too_long``) when a namespaced id is too long.
        """
        calls = {k: c for k, c in self._called.items() if k != key and k not in self._named}
        raised = []
        for i in carry_up(key, outcome, self.limits, calls):
            if i.id in self.ctx.prior_interrupts and i.id not in self.ctx.answers:
                continue  # carried into this run's outcome by the runtime, as it was
            raised.append(self.ctx.interrupt(
                i.reason, id=i.id, message=i.message, response_schema=i.response_schema,
                expires_at=i.expires_at, metadata=i.metadata))
            self._named.update(calls)
            calls = {}
        return raised

    async def _as_ended(self, agent: str, earlier: ChildCall, *, moved_past: bool,
                        within_s: float | None, grace_s: float = 0.0) -> ChildOutcome | None:
        """How an earlier child ended, read from its thread: its last run that ended, or —
        ``moved_past`` — the run begun after the one that asked (waited for, when it has
        not ended yet); None when there is none (or it asked nothing yet: submit)."""
        began = time.monotonic()
        while True:
            history = await self._read(earlier.thread_id)
            run = history.after(earlier.run_id) if moved_past else history.last_ended()
            if run is not None and history.ended(run):
                return outcome_of(agent, earlier.thread_id, run, history.runs[run])
            waited = time.monotonic() - began
            if ((run is None and waited >= grace_s)
                    or (within_s is not None and waited > within_s)):
                return None
            await asyncio.sleep(POLL_S)

    async def _read(self, thread_id: str) -> ChildHistory:
        """The child thread's events, from its first one when known: filtered as read, so
        memory follows the child's records, not its shared partition's history."""
        history = ChildHistory()
        seen: set[tuple[bytes, bytes]] = set()
        async with TopicReader(self.settings, "agui-relay-delegation") as reader:
            tp = await reader.key_partition(self.settings.topics.events, thread_id)
            known = self._starts.get(thread_id)
            start = (Start.after({tp: known.offset}) if known and known.partition == tp.partition
                     else Start.beginning())
            async for batch in reader.read_batches([tp], start):
                for record in batch:
                    found = child_event(thread_id, record.key, record.value, record.headers)
                    if found is None or (found.run_id, found.seq) in seen:
                        continue
                    seen.add((found.run_id, found.seq))
                    history.add(found.run_id.decode(errors="replace"), found.event,
                                EventOffset(record.partition, record.offset))
        if history.start is not None:
            self._starts.setdefault(thread_id, history.start)
        return history

    async def _history(self, thread_id: str) -> dict[str, Any]:
        history = await self._read(thread_id)
        transcript = await asyncio.to_thread(replay, history.events,
                                             max_state_bytes=self.settings.max_record_bytes)
        return transcript.input_fields()

    async def _submit(self, request: RunRequest, within_s: float | None) -> ChildOutcome:
        thread_id, run_id = request.input.thread_id, request.input.run_id
        topics = self.settings.topics
        async with TopicReader(self.settings, "agui-relay-delegation") as reader:
            await reader.assign([await reader.key_partition(topics.decisions, thread_id),
                                 await reader.key_partition(topics.events, thread_id)],
                                Start.end())
            parent = tracing.current()
            trace = [(TRACEPARENT, parent.child().header().encode())] if parent else None
            await self._publish(topics.requests, thread_id, encode(request), trace)
            try:
                return await self._follow(reader, request, within_s)
            except BaseException:  # cancelled, or given up on (no decision, too long)
                await asyncio.shield(self._cancel_child(thread_id, run_id))
                raise

    async def _follow(self, reader: TopicReader, request: RunRequest, within_s: float | None
                      ) -> ChildOutcome:
        thread_id, run_id = request.input.thread_id, request.input.run_id
        decided = False
        decision_by = time.monotonic() + self.decision_timeout_s
        run_by = None if within_s is None else time.monotonic() + within_s
        events: list[dict[str, Any]] = []
        seen: set[bytes] = set()
        async for batch in reader.batches(heartbeat=True):
            for record in batch:
                if record.key != thread_id.encode():
                    continue
                if record.topic == self.settings.topics.decisions and not decided:
                    decision = self._decision(record.value, request.request_id)
                    if decision is None or decision.verdict == "queued":
                        continue
                    if decision.verdict == "rejected":
                        return ChildOutcome(request.agent, thread_id, run_id, "refused",
                                            error=f"{decision.code}: {decision.message}")
                    decided = True
                    continue
                found = (child_event(thread_id, record.key, record.value, record.headers)
                         if record.topic == self.settings.topics.events else None)
                if found is None or found.run_id != run_id.encode() or found.seq in seen:
                    continue
                self._starts.setdefault(thread_id, EventOffset(record.partition, record.offset))
                seen.add(found.seq)
                events.append(found.event)
                if found.kind in (b"RUN_FINISHED", b"RUN_ERROR"):
                    return outcome_of(request.agent, thread_id, run_id, events)
            now = time.monotonic()
            if not decided and not events and now > decision_by:
                raise DelegationError(f"no decision on child run {run_id} within "
                                      f"{self.decision_timeout_s:g}s (is the gatekeeper up?)")
            if run_by is not None and now > run_by:
                raise DelegationError(f"child run {run_id} did not end within {within_s:g}s")
        raise DelegationError("stopped while following the child run")

    @staticmethod
    def _decision(value: bytes, request_id: str) -> Decision | None:
        try:
            decision = decode(Decision, value)
        except DecodeError:
            return None
        return decision if decision.request_id == request_id else None

    async def _publish(self, topic: str, key: str, value: bytes,
                       headers: list[tuple[str, bytes]] | None = None) -> None:
        RecordGuard.of(self.settings.max_record_bytes).check(
            f"the child run's record on {topic}", "child_request_too_large", key.encode(),
            value, headers)
        producer = new_producer(self.settings, "agui-relay-delegation")
        try:
            await producer.start()
            await producer.send_and_wait(topic, value, key=key.encode(), headers=headers)
        finally:
            await producer.stop()

    async def _cancel_child(self, thread_id: str, run_id: str) -> None:
        command = ControlCommand(thread_id=thread_id, run_id=run_id,
                                 requested_by=f"delegation:{self.ctx.run_id}",
                                 requested_at=datetime.now(UTC))
        await self._publish(self.settings.topics.control, thread_id, encode(command))
