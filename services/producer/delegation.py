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
(a new request) continues the child thread its interrupts name. A child
id that would be longer than ``AGUI_MAX_ID_LENGTH`` fails the parent run
(``child_id_too_long``) instead of being submitted, and so does a child
request whose record would not fit (``child_request_too_large``).

A child that ends interrupted cannot be answered by the parent's caller
directly — they talk to the parent. So ``carry_up`` re-raises each child
interrupt on the parent with a namespaced id (``<key>/<child id>``, unique
in the parent's run), the same reason, message, responseSchema and
expiresAt, and the child's identity in ``metadata["agui-relay.child"]``.
The parent's run ends interrupted; a person answers once, at the top. When
the parent is resumed, its agent runs again from the start and calls the
same ``key``: ``Delegation.call`` finds the answers addressed to that key in
``ctx.answers`` and ``route_down`` turns them into the child's resume list
(ids un-namespaced, statuses and payloads as given), sent as the child
thread's next run with the child's accumulated messages and state (rebuilt
from its events; a record under the child's key that is no event of it, not a
JSON object or a tombstone, is skipped as the consumer service skips it).
Cancelling an expired interrupt at the top therefore cancels it in the
child, which is how the child thread moves past it.

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


def carry_up(key: str, outcome: ChildOutcome) -> list[Interrupt]:
    """The parent's interrupts for a child's: ids namespaced, the child named in metadata."""
    carried = []
    for child in outcome.interrupts:
        metadata = dict(child.metadata or {})
        metadata[CHILD_METADATA] = {"agent": outcome.agent, "threadId": outcome.thread_id,
                                    "runId": outcome.run_id, "interruptId": child.id,
                                    **({"toolCallId": child.tool_call_id}
                                       if child.tool_call_id else {})}
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

    def child_thread(self, key: str) -> str:
        """Child ``key``'s thread: the one this thread's open interrupts name for it (a
        resumed parent continues the child its earlier run started), else the one this
        run's request id gives."""
        check_key(key)
        prefix = f"{self.ctx.thread_id}{SEPARATOR}{key}-"
        for interrupt in self.ctx.prior_interrupts.values():
            named = (interrupt.metadata or {}).get(CHILD_METADATA)
            thread = named.get("threadId") if isinstance(named, dict) else None
            if (interrupt.id.startswith(f"{key}{SEPARATOR}") and isinstance(thread, str)
                    and thread.startswith(prefix)):
                return thread
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
        """Run ``agent`` as child ``key`` (or continue it with the answers routed down)."""
        request = await self.request(agent, key, messages, state=state,
                                     forwarded_props=forwarded_props)
        return await self._submit(request, within_s)

    async def request(self, agent: str, key: str, messages: Sequence[Mapping[str, Any]] = (),
                      *, state: Any = None, forwarded_props: Any = None) -> RunRequest:
        """The child's ``RunRequest`` (reading the child thread's history to continue it)."""
        thread_id = self.child_thread(key)
        run_id = within_limit("child run id", f"{self.ctx.run_id}{SEPARATOR}{key}-"
                              f"{uuid.uuid4().hex[:8]}", self.limits)
        resume = self.pending_answers(key)
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
        return RunRequest(request_id=f"req-{uuid.uuid4()}", agent=agent,
                          input=RunAgentInput.model_validate(wire),
                          submitted_at=datetime.now(UTC), principal=self.ctx.principal)

    def carry_up(self, key: str, outcome: ChildOutcome) -> list[Interrupt]:
        """Raise the child's interrupts on this run (namespaced); the run ends interrupted."""
        return [self.ctx.interrupt(i.reason, id=i.id, message=i.message,
                                   response_schema=i.response_schema, expires_at=i.expires_at,
                                   metadata=i.metadata)
                for i in carry_up(key, outcome)]

    async def _history(self, thread_id: str) -> dict[str, Any]:
        async with TopicReader(self.settings, "agui-relay-delegation") as reader:
            tp = await reader.key_partition(self.settings.topics.events, thread_id)
            records = await reader.read_all([tp])
        seen: set[tuple[bytes, bytes]] = set()
        events = []
        for record in records:
            found = child_event(thread_id, record.key, record.value, record.headers)
            if found is None or (found.run_id, found.seq) in seen:
                continue
            seen.add((found.run_id, found.seq))
            events.append(found.event)
        transcript = await asyncio.to_thread(replay, events,
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
