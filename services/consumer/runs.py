"""Starting a run over HTTP: validate, publish, await the decision, stream.

The order is the point of this module:

1. check the agent's name is not too long (400 ``id_too_long``) and the body
   is declared JSON (415, ``headers``), then that the agent is served and the
   fan-out is positioned (else 404 / 503);
2. read the body under the size limit, count its messages and resume
   entries (413, ``limits``), check its depth and ids (400
   ``json_too_deep`` / ``id_too_long``), validate it as a ``RunAgentInput``
   with the ag-ui-protocol model (400), check the caller may run on its
   thread (404 when it is another tenant's, ``tenancy``), and that the
   RunRequest it becomes fits in a record, key and ``traceparent`` header
   included (413); a new run (no resume entries) of a tenant whose threads
   hold ``AGUI_MAX_OPEN_INTERRUPTS`` open interrupts is refused (429
   ``too_many_open_interrupts``), before it is forwarded or published;
3. subscribe the run's stream and register the request's decision waiter —
   both *before* publishing, so nothing that arrives early is lost;
4. publish the RunRequest keyed by threadId, with the request's
   ``traceparent`` header (a child of the client's, or a new trace; the
   gatekeeper and the worker continue it), and wait for its decision
   (``AGUI_DECISION_TIMEOUT_S`` → 504; after a ``queued`` verdict, keep
   waiting up to ``AGUI_QUEUED_TIMEOUT_S`` for the same requestId's final one);
5. rejected → the problem (409/422/400; 404 for the gatekeeper's ownership
   backstop, and for resume entries on a thread the view never saw run,
   ``tenancy``) with no stream byte, and the subscription is dropped;
   admitted → the caller streams the subscription, after the run's records
   already on the log when the admission was replayed (``Decision.replayed``:
   the request was sent again under its requestId, and its run may have ended)
   or the POST is a retried forward (``from_log``); such a run found over
   with nothing on the log (retention took its records) is the replay
   route's ``404 unknown_run``, not a stream waiting for it for ever.

A 504 does not withdraw the request: the gatekeeper may still admit it, and
the run then executes unobserved (``GET /threads/{id}`` shows it).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import orjson
from ag_ui.core import RunAgentInput
from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from contracts import ControlCommand, Decision, RunRequest, encode
from contracts.codec import validation_detail
from contracts.exact_json import IntegerOutOfRange, loads_exact
from contracts.headers import AGENT, TRACEPARENT, ascii_int
from contracts.limits import InputLimits, bracket_count, check_run_input
from contracts.records import identity
from services.consumer import lookback
from services.consumer.agents import AgentDirectory, LookupDeferred
from services.consumer.forward import Forwarder, Here, forwarded
from services.consumer.headers import require_json
from services.consumer.limits import EdgeLimits, check_counts, check_ids, too_deep_to_parse
from services.consumer.metrics import ConsumerMetrics
from services.consumer.problems import (
    BROKER_RETRY_S,
    DecisionTimeout,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    RetryLater,
    TooManyRequests,
    UnsupportedMediaType,
    limit_problem,
)
from services.consumer.publisher import NotAcknowledgedError, Publisher
from services.consumer.settings import ConsumerSettings
from services.consumer.sse import EventStreamResponse, StreamOutcome, run_body
from services.consumer.streams import Delivery, FanOut, RunStream
from services.consumer.tenancy import Tenancy, rejection
from services.kafka.clients import KafkaError
from services.runtime import tracing
from services.runtime.logging import bind_run, run_fields
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, Any]], None]


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes (413)."""
    declared = ascii_int(request.headers.get("content-length"))
    if declared is not None and declared > limit:
        raise PayloadTooLarge("payload_too_large", f"the body exceeds {limit} bytes")
    size, chunks = 0, []
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge("payload_too_large", f"the body exceeds {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # the client left, or the protocol answered a body too slow: nobody reads this
        raise RequestTimeout("request_timeout", "the connection closed before the body "
                             "was complete") from None
    return b"".join(chunks)


def parse_input(body: bytes, settings: ConsumerSettings, limits: InputLimits) -> RunAgentInput:
    """The body as a RunAgentInput (400 ``invalid_json`` / ``invalid_input`` /
    ``json_too_deep`` / ``id_too_long``; 413 too many items)."""
    try:
        raw = loads_exact(body)
    except IntegerOutOfRange as exc:
        raise InvalidInput("invalid_input", f"the body has an {exc}") from None
    except orjson.JSONDecodeError as exc:
        if exc.msg == "depth limit exceeded":
            raise too_deep_to_parse(limits) from None
        raise InvalidInput("invalid_json", f"the body is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidInput("invalid_input", "the body must be a RunAgentInput object")
    check_counts(raw, max_messages=settings.max_messages, max_resume=limits.max_resume_entries)
    broken = check_run_input(raw, limits, size_hint=bracket_count(body))
    if broken is not None:
        raise limit_problem(broken)
    for member in ("threadId", "runId"):  # no route could reach an empty one afterwards
        if raw.get(member) == "":
            raise InvalidInput("invalid_input", f"{member} must not be empty: its thread and "
                               "run are reached by it in every route", extra={"field": member})
    try:
        return RunAgentInput.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInput("invalid_input", validation_detail(exc)) from exc


class RunService:
    """POST /agents/{agent} and cancel, over the fan-out and the publisher."""

    def __init__(self, settings: ConsumerSettings, kafka: KafkaSettings, fanout: FanOut,
                 publisher: Publisher, agents: AgentDirectory, metrics: ConsumerMetrics,
                 spawn: Spawn, tenancy: Tenancy, limits: EdgeLimits,
                 forwarder: Forwarder | None = None) -> None:
        self.settings = settings
        self.kafka = kafka
        self.fanout = fanout
        self.publisher = publisher
        self.agents = agents
        self.metrics = metrics
        self.spawn = spawn
        self.tenancy = tenancy
        self.limits = limits
        self.forwarder = forwarder
        """Sends a run on another instance's thread to that instance (None: all here)."""
        self.open_interrupts: Callable[[str], int] | None = None
        """A tenant's open interrupts (the inbox index's count; None: not counted)."""
        self.closing = False

    async def start_run(self, agent: str, request: Request, principal: str | None,
                        key_name: str | None = None) -> Response:
        """Steps 1-5 of the module docstring; returns the admitted run's stream.

        ``principal``: the tenant (who owns threads); ``key_name``: its API key's
        name, when it has one (who answered, with the tenant).
        """
        try:
            check_ids(self.limits.input, {"agent": agent})
            require_json(request.headers.get("content-type"), required=True)
        except (InvalidInput, UnsupportedMediaType) as problem:
            self.metrics.requests.labels(problem.code).inc()
            raise
        try:
            known = await self.agents.knows(agent)
        except LookupDeferred as exc:
            self.metrics.requests.labels("agent_lookup_deferred").inc()
            raise RetryLater("agent_lookup_deferred", f"agent {agent!r} is not known here "
                             f"yet and could not be looked up now ({exc})") from None
        if not known:
            self.metrics.requests.labels("unknown_agent").inc()
            raise NotFound("unknown_agent", f"no agent named {agent!r} is served here")
        if not self.fanout.ready.is_set():
            raise RetryLater("not_ready", "the service is still connecting to Kafka")
        try:
            body = await read_body(request, self.settings.max_body_bytes)
            run_input = parse_input(body, self.settings, self.limits.input)
        except (InvalidInput, PayloadTooLarge, RequestTimeout) as problem:
            self.metrics.requests.labels(problem.code).inc()
            raise
        principal = principal or self.settings.principal
        self._within_open_interrupts(run_input, principal)
        requested_by = identity(principal, key_name) or principal
        here = Here()
        if self.forwarder is not None:
            answer = await self.forwarder.dispatch(
                request, self.fanout.partition_of(run_input.thread_id), body=body, run=True,
                on_left=lambda: self._disconnected(run_input.thread_id, run_input.run_id,
                                                   requested_by))
            if isinstance(answer, Response):
                return answer
            here = answer
        try:
            unseen = self.tenancy.check_run(run_input.thread_id, principal)
        except NotFound:
            self.metrics.requests.labels("unknown_thread").inc()
            raise
        request_id = here.request_id or str(uuid.uuid4())
        run_request = RunRequest(request_id=request_id, agent=agent, input=run_input,
                                 submitted_at=datetime.now(UTC), principal=principal,
                                 key_name=key_name)
        value = encode(run_request)
        trace = tracing.next_hop(request.headers.get(TRACEPARENT))
        headers = [(TRACEPARENT, trace.header().encode("ascii")), (AGENT, agent.encode())]
        key = run_input.thread_id.encode("utf-8")
        size = self.limits.record.excess(key, value, headers)
        if size is not None:
            self.metrics.requests.labels("payload_too_large").inc()
            raise PayloadTooLarge("payload_too_large",
                                  self.limits.record.why("the run request", size))
        bind_run(run_input.thread_id, run_input.run_id, run_request.request_id, trace.trace_id)
        stream = self.fanout.subscribe(run_input.thread_id, run_input.run_id)
        try:
            decision = await self._decide(run_request, value, headers, unseen)
        except BaseException:
            self.fanout.unsubscribe(stream)
            raise
        outcome = StreamOutcome()
        try:
            preface = await self.opening(run_input, decision, outcome) \
                if here.retried or decision.replayed else None
        except BaseException:  # a 404 of a run gone, a thread store failing: no stream
            self.fanout.unsubscribe(stream)
            raise
        # a forwarded request's client is the forwarding instance's (see ``dispatch``)
        return self.respond(stream, requested_by, preface=preface,
                            owns_run=not forwarded(request), outcome=outcome)

    def _within_open_interrupts(self, run_input: RunAgentInput, principal: str) -> None:
        """Refuse a new run of a tenant whose threads hold ``AGUI_MAX_OPEN_INTERRUPTS``
        (429): each open interrupt is held in memory by every instance, the gatekeeper and
        the notifier until it is answered, so an unanswered pile is the tenant's to clear.
        A resume (it answers some) is never refused so; checked on every instance a
        request passes, all of which count the same tenant-wide index."""
        limit = self.settings.max_open_interrupts
        if not limit or run_input.resume or self.open_interrupts is None:
            return
        held = self.open_interrupts(principal)
        if held < limit:
            return
        self.metrics.requests.labels("too_many_open_interrupts").inc()
        raise TooManyRequests(
            "too_many_open_interrupts",
            f"this tenant's threads hold {held} open interrupts, the most allowed; answer "
            "or cancel some (GET /interrupts lists them) before starting another run",
            extra={"openInterrupts": held, "limit": limit})

    async def opening(self, run_input: RunAgentInput, admission: Decision,
                      outcome: StreamOutcome) -> AsyncIterator[Delivery | None] | None:
        """The preface of the stream of a run that may have begun already: its records on
        the log (``from_log``), streamed as they are read, keep-alives meanwhile. A run
        over before the scan began is read before the response starts: with nothing on the
        log (a request sent again once retention took its records, the gatekeeper still
        remembering its admission) it is answered as the replay route answers it, ``404
        unknown_run`` (``replay.opening``), where a stream had waited live for ever."""
        from services.consumer.replay import opening, over  # replay builds on this module

        thread_id, run_id = run_input.thread_id, run_input.run_id
        done = over(self.fanout, self.tenancy.threads.get(thread_id), thread_id, run_id)
        scan = self.from_log(run_input, admission, outcome)
        if not done:
            return scan
        return await opening(scan, None, live=False, thread_id=thread_id, run_id=run_id)

    def from_log(self, run_input: RunAgentInput, admission: Decision,
                 outcome: StreamOutcome) -> AsyncGenerator[Delivery | None, None]:
        """The run's records already on the topic: a retried forward's run may have
        started from the first attempt (``forward``), and a replayed admission's (a
        request sent again under its requestId) may have started, or ended, long ago.
        Only records since the run can have begun are read: not before its admission
        (the decision's time, kept when the gatekeeper answers a repeated requestId) and,
        for a retry answered anew, not longer ago than the first attempt can have been
        sent (``Forwarder.attempt_span_s``), each less ``lookback.CLOCK_SKEW_S`` between
        those clocks and the worker's."""
        from services.consumer.replay import scan_run  # replay builds on this module

        admitted_at = admission.decided_at.timestamp()
        if admission.replayed:
            since, reason = lookback.since_ms(admitted_at), "repeated_request"
        else:
            span = self.forwarder.attempt_span_s if self.forwarder is not None else 0.0
            since = lookback.since_ms(max(admitted_at, time.time() - span))
            reason = "retried_forward"
        return scan_run(self.kafka, self.fanout, run_input.thread_id, run_input.run_id,
                        reason=reason, wait=True, since_ms=since, client=outcome)

    async def _decide(self, run_request: RunRequest, value: bytes,
                      headers: list[tuple[str, bytes]], unseen: bool) -> Decision:
        """Publish and wait for the final decision; raise its problem unless admitted."""
        fields = run_fields(run_request.input.thread_id, run_request.input.run_id,
                            run_request.request_id)
        waiter = self.fanout.expect(run_request.request_id, run_request.input.thread_id,
                                    run_request.input.run_id)
        started = time.monotonic()
        try:
            try:
                await self.publisher.send_request(run_request.input.thread_id, value, headers)
            except KafkaError as exc:
                self.metrics.requests.labels("broker_unavailable").inc()
                raise unpublished(exc, "the run request", "decided and run", "the run again "
                                  "under a new runId, or follow this one with GET "
                                  "/threads/{threadId} once the broker is back") from exc
            timeout = self.settings.decision_timeout_s
            while True:
                try:
                    decision = await waiter.next(timeout)
                except TimeoutError:
                    self.metrics.requests.labels("timeout").inc()
                    log.warning("no decision within %.1f s", timeout, extra=fields)
                    raise DecisionTimeout(
                        "decision_timeout",
                        f"the gatekeeper did not decide within {timeout:g} s; the request "
                        "may still be decided later (see GET /threads/{threadId})") from None
                if decision.verdict != "queued":
                    break
                timeout = self.settings.queued_timeout_s
        finally:
            self.fanout.forget(waiter)
        self.metrics.decision_wait.observe(time.monotonic() - started)
        self.metrics.requests.labels(decision.verdict).inc()
        if decision.verdict == "rejected":
            log.info("request rejected: %s", decision.code, extra=fields)
            raise rejection(decision, run_request.input.thread_id, unseen=unseen)
        if (decision.thread_id, decision.run_id) != (run_request.input.thread_id,
                                                     run_request.input.run_id):
            # the gatekeeper answers a requestId it decided as it did: a forwarded-looking
            # request whose agui-request-id was another run's would wait for ever
            raise InvalidInput("invalid_header", f"request id {run_request.request_id!r} "
                               f"was decided already, for run {decision.run_id!r} of thread "
                               f"{decision.thread_id!r}; a request id names one request")
        log.debug("request admitted; streaming the run", extra=fields)
        return decision

    def respond(self, stream: RunStream, requested_by: str, *, after: int | None = None,
                preface: AsyncIterator[Delivery | None] | None = None,
                owns_run: bool = True,
                outcome: StreamOutcome | None = None) -> EventStreamResponse:
        """The SSE response over ``stream``; unsubscribes (and maybe cancels) on close.

        ``owns_run``: the stream is the run's POST response to its own client, so a
        client that disconnects before the terminal event may cancel it (replays never
        do, nor a forwarded POST: the forwarding instance does). ``outcome``: the one a
        preface's scan was given already.
        """
        state = outcome or StreamOutcome()

        def on_close() -> None:
            if owns_run and not state.terminal and not state.dropped:
                self._disconnected(stream.thread_id, stream.run_id, requested_by)
            self.fanout.unsubscribe(stream)

        body = run_body(stream, state, keepalive_s=self.settings.keepalive_s, after=after,
                        preface=preface, max_event_bytes=self.kafka.max_record_bytes)
        return EventStreamResponse(body, on_close, state)

    def _disconnected(self, thread_id: str, run_id: str, requested_by: str) -> None:
        """The run's client left before its end (not cut for reading nothing)."""
        if self.closing:
            return
        fields = run_fields(thread_id, run_id)
        if not self.settings.cancel_on_disconnect:
            log.info("client disconnected; the run goes on", extra=fields)
            return
        log.info("client disconnected; cancelling the run", extra=fields)
        self.spawn(self.cancel(thread_id, run_id, requested_by, origin="disconnect"))

    async def cancel(self, thread_id: str, run_id: str, requested_by: str, *,
                     origin: str) -> ControlCommand:
        """Publish a ControlCommand for the run."""
        command = ControlCommand(thread_id=thread_id, run_id=run_id, requested_by=requested_by,
                                 requested_at=datetime.now(UTC))
        try:
            await self.publisher.cancel(command)
        except KafkaError as exc:
            raise unpublished(exc, "the cancel", "carried out", "it again") from exc
        self.metrics.cancels.labels(origin).inc()
        return command


def spawner(tasks: set[asyncio.Task[Any]]) -> Spawn:
    """A fire-and-forget launcher that keeps a reference until the task ends."""

    def spawn(coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return spawn


def unpublished(exc: KafkaError, what: str, done: str, again: str) -> RetryLater:
    """``503 broker_unavailable`` for ``what`` the broker did not take. One sent and not
    acknowledged in time is not withdrawn: it may still be written, and ``done``, once
    the broker is back, and the answer says so (``publisher.NotAcknowledgedError``)."""
    if isinstance(exc, NotAcknowledgedError):
        detail = (f"{what} was sent but {exc}: it may still be {done} once the broker is "
                  f"back; send {again}")
    else:
        detail = f"could not publish {what}: {exc}"
    return RetryLater("broker_unavailable", detail, retry_after_s=BROKER_RETRY_S)
