"""Any instance takes any request: a thread's routes forwarded to its partition's owner.

An instance reads only the partitions it owns (``ownership``), so the
routes tied to one thread — ``POST /agents/{agent}`` (its thread is in the
body), ``GET /threads/{id}``, the replay and the cancel — are served where
the thread's partition is read. ``Forwarder.dispatch`` decides, once the
request's ids are checked and (for a POST) its body read and validated:

1. wait until ownership is settled (no rebalance under way), at most
   ``AGUI_FORWARD_SETTLE_S``; this instance owns the partition → serve here
   (``None``);
2. else send the request to the owner over HTTP (``owner_http``: one
   connection per forward, parsed by httptools):
   method, raw path and query, the body, and the headers that mean
   something to the owner — ``Authorization`` (the owner authenticates the
   same way), ``Content-Type``, ``Last-Event-ID``, ``traceparent`` and
   ``tracestate`` — plus ``agui-forwarded-by`` (the loop guard: a request
   that carries it is never forwarded again; an instance that does not own
   its thread answers it ``503 owner_unavailable``), and, on a POST,
   ``agui-request-id``: the RunRequest's id, chosen here, so that a retried
   forward is the same request to the gatekeeper (which answers a requestId
   it has decided with the same decision and never dispatches it twice);
3. the owner's answer is passed on (``passed_on``): its status and headers
   (a problem, ``WWW-Authenticate``, ``Retry-After`` and all) and its body —
   an event stream's bytes as they arrive, never buffered. The client
   leaving cancels the upstream request and closes its connection; the
   owner never cancels a forwarded run for that (it cannot tell a client
   leaving from a client cut here for reading nothing), so this instance
   applies ``AGUI_CANCEL_ON_DISCONNECT`` itself (``on_left``); the owner's
   connection breaking mid-stream, or falling silent for four keep-alive
   periods (the owner sends one every period), aborts the client's
   connection: a truncated stream, no byte invented and no end of body
   written, which the client continues with ``Last-Event-ID`` through any
   instance;
4. a forward that fails before any byte of an answer (the owner cannot be
   reached, answers ``owner_unavailable``: its map is newer or older than
   ours, or loses the partition before it answered: an owner frozen with the
   connection open, whose partitions the group hands on) is retried once,
   after ownership has moved on (a newer settled assignment, within the same
   bound) — against the new owner, or here when
   that is this instance. The retried POST keeps its requestId and is marked
   a retry (``agui-forward-attempt: 2``): the run may have started from the
   first attempt, so its owner answers it from the log first (``replay``'s
   scan), then live. A second failure, or no settled owner in time, is a
   ``503 owner_unavailable`` with ``Retry-After``. Every wait is bounded (for
   the owner's head: a run's POST by its decision, queue and keep-alive
   times, any other route by four keep-alive periods), a client that leaves
   meanwhile ends it and closes the owner's connection, and nothing is
   dispatched twice.

The headers ``agui-forwarded-by``, ``agui-request-id`` and
``agui-forward-attempt`` are trusted from whoever sends them: put the
instances behind a proxy that drops them from clients' requests (a client
sending them can only make its own request served as a forwarded one). What
keeps a chosen request id to the client's own request: one in the relay's own
namespace (``RELAY_REQUEST_PREFIXES``: the expiry policy's ids are derived,
so predictable) is refused ``400 invalid_header`` (``arrived_as``), and the
gatekeeper never answers a policy's request with a client's decision; a
request id names a request on one thread (``FanOut.expect``); and a request
sent again under its id is answered with its run from the log
(``Decision.replayed``, ``runs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from contracts.limits import LimitExceeded
from contracts.records import RELAY_REQUEST_PREFIXES, REQUEST_ID_MAX_LENGTH
from services.consumer import owner_http
from services.consumer.metrics import ConsumerMetrics
from services.consumer.ownership import Ownership
from services.consumer.problems import (
    PROBLEM_TYPE,
    InvalidInput,
    OwnerUnavailable,
    limit_problem,
)
from services.consumer.sse import EventStreamResponse, StreamOutcome, disconnected

log = logging.getLogger(__name__)

FORWARDED_BY = "agui-forwarded-by"
REQUEST_ID = "agui-request-id"
ATTEMPT = "agui-forward-attempt"
PASSED = ("authorization", "content-type", "last-event-id", "traceparent", "tracestate",
          "accept")
"""Request headers the owner is sent (besides ours)."""
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer",
                        b"upgrade", b"proxy-authenticate", b"proxy-authorization",
                        b"content-length", b"date", b"server"})
"""Response headers not passed on: hop-by-hop (RFC 9110 7.6.1: the connection to the
client is ours), and the two this instance's server writes itself (``Date`` is single-valued,
and passed on it came twice)."""
CONNECT_S = 2.0
RETRY_AFTER_S = 2


@dataclass(frozen=True, slots=True)
class Here:
    """Serve the request on this instance (``dispatch``'s answer when not forwarded)."""

    request_id: str | None = None
    """The RunRequest id to publish under (a forwarded or retried POST), else None."""
    retried: bool = False
    """A forward retried: a run may have started already, read it from the log first."""


def forwarded(request: Request) -> bool:
    """Whether another instance sent this request (it is never forwarded again)."""
    return FORWARDED_BY in request.headers


def arrived_as(request: Request) -> Here:
    """What a request forwarded here says about itself (``Here()`` for a client's own).

    Raises the 400 ``id_too_long`` for an ``agui-request-id`` no RunRequest can carry, and
    ``invalid_header`` for one in the relay's own namespace (``RELAY_REQUEST_PREFIXES``: the
    expiry policy's are predictable): the headers are trusted from whoever sends them, and
    a request id is published as is.
    """
    if not forwarded(request):
        return Here()
    request_id = request.headers.get(REQUEST_ID) or None
    if request_id is not None and len(request_id) > REQUEST_ID_MAX_LENGTH:
        raise limit_problem(LimitExceeded("id_too_long", REQUEST_ID, len(request_id),
                                          REQUEST_ID_MAX_LENGTH))
    if request_id is not None and request_id.startswith(RELAY_REQUEST_PREFIXES):
        raise InvalidInput("invalid_header", f"{REQUEST_ID} {request_id!r} is in the relay's "
                           f"own namespace ({', '.join(RELAY_REQUEST_PREFIXES)}): a client's "
                           "request may not take the id of a request the relay makes itself")
    return Here(request_id, request.headers.get(ATTEMPT) == "2")


class Forwarder:
    """Routes a thread's requests to the instance that owns its partition."""

    def __init__(self, ownership: Ownership, metrics: ConsumerMetrics, *, settle_s: float,
                 read_s: float, other_read_s: float | None = None) -> None:
        self.ownership = ownership
        self.metrics = metrics
        self.settle_s = settle_s
        self.read_s = read_s
        """Longer than any silence a run's answer may have (a queued decision, the
        keep-alive period), so a dead owner still cannot hang a client for ever."""
        self.other_read_s = min(read_s, other_read_s or read_s)
        """The same for every other route (a thread's state, a replay, a cancel), which
        waits for no decision: an owner that accepts connections and answers nothing
        held a ``GET /threads`` for 175 s."""

    @property
    def attempt_span_s(self) -> float:
        """The longest a retry can come after its first attempt was sent: that attempt's
        wait for an answer, then the wait for ownership to move on."""
        return self.read_s + self.settle_s

    async def aclose(self) -> None:
        """Nothing to close: a forward's connection lives as long as its request."""

    def _unavailable(self, detail: str) -> OwnerUnavailable:
        self.metrics.forwards.labels("unavailable").inc()
        return OwnerUnavailable(detail, RETRY_AFTER_S)

    async def dispatch(self, request: Request, partition: int, *, body: bytes | None = None,
                       run: bool = False, on_left: Callable[[], None] | None = None
                       ) -> Response | Here:
        """The owner's response, or ``Here`` (the module docstring's steps; ``run``: a
        POST that publishes a RunRequest, which gets an idempotency key). ``on_left``:
        called when the client leaves a forwarded stream before the owner ended it (not
        when it was closed for reading nothing): the owner cannot tell a client leaving
        from this instance closing the connection, so the run's disconnect rule is
        applied here."""
        arrived = arrived_as(request)
        if not await self.ownership.wait_settled(self.settle_s):
            raise self._unavailable("the instances are rebalancing; ask again")
        route = self.ownership.route(partition, forwarded=forwarded(request))
        if route.local:
            return arrived
        if route.url is None:
            raise self._unavailable("no instance owns this thread's partition now")
        if route.url == self.ownership.url:  # would come back here, and be refused
            log.error("partition %d is assigned to this instance's URL %s but not read "
                      "here: a topic it reads is missing (see /readyz and agui-relay topics "
                      "describe), or two instances share one AGUI_ADVERTISED_URL",
                      partition, route.url)
            raise self._unavailable("this thread's partition is assigned to this instance's "
                                    "address but not read here: a topic is missing, or "
                                    "AGUI_ADVERTISED_URL is shared by two instances")
        request_id = str(uuid.uuid4()) if run else None
        generation = self.ownership.generation
        try:
            return await self._forward(request, partition, route.url, generation, body,
                                       request_id, run=run, on_left=on_left)
        except ClientGoneError:  # nobody to answer: the owner's connection is closed already
            self.metrics.forwards.labels("client_left").inc()
            log.info("the client left before the owner (%s) answered", route.url)
            return Response(status_code=499)

    async def _forward(self, request: Request, partition: int, url: str, generation: int,
                       body: bytes | None, request_id: str | None, *, run: bool,
                       on_left: Callable[[], None] | None) -> Response | Here:
        """Steps 2-4 of the module docstring, from the first attempt at ``url``."""
        response = await self._send(url, partition, request, body, request_id,
                                    attempt=1, run=run, on_left=on_left)
        if response is not None:
            self.metrics.forwards.labels("forwarded").inc()
            return response
        self.metrics.forwards.labels("failed_before_any_byte").inc()
        if not await self.ownership.moved_on(generation, self.settle_s):
            raise self._unavailable(f"the owner of this thread ({url}) cannot be "
                                    "reached and no other instance has taken it over yet")
        route = self.ownership.route(partition, forwarded=False)
        if route.local:
            self.metrics.forwards.labels("served_here").inc()
            return Here(request_id, retried=True)
        if route.url is not None:
            response = await self._send(route.url, partition, request, body, request_id,
                                        attempt=2, run=run, on_left=on_left)
            if response is not None:
                self.metrics.forwards.labels("retried").inc()
                return response
        raise self._unavailable("the owner of this thread cannot be reached")

    async def _send(self, url: str, partition: int, request: Request, body: bytes | None,
                    request_id: str | None, *, attempt: int, run: bool,
                    on_left: Callable[[], None] | None = None) -> Response | None:
        """The owner's response, once its head arrived; None when it failed before."""
        headers = {name: value for name in PASSED
                   if (value := request.headers.get(name)) is not None}
        headers[FORWARDED_BY] = self.ownership.url or "unadvertised"
        headers[ATTEMPT] = str(attempt)
        if request_id is not None:
            headers[REQUEST_ID] = request_id
        raw = request.scope.get("raw_path") or request.scope["path"].encode("utf-8")
        query = request.scope.get("query_string") or b""
        target = raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        read_s = self.read_s if run else self.other_read_s
        try:
            response = await self._head(url, partition, request, read_s, owner_http.connect(
                url, request.method, target, headers.items(), body, connect_s=CONNECT_S,
                read_s=read_s))
        except (OSError, TimeoutError) as exc:
            log.warning("forward to %s failed before any byte: %s", url,
                        exc or type(exc).__name__)
            return None
        try:
            if response.status == 503 and await _owner_unavailable(response):
                log.info("forward to %s: it does not own the partition (yet)", url)
                return None
            return await passed_on(response, on_left, silence_s=self.other_read_s)
        except ConnectionResetError as exc:  # a whole answer broke off: none of it passed on
            log.warning("forward to %s failed before its answer was whole: %s", url, exc)
            return None

    async def _head(self, url: str, partition: int, request: Request, read_s: float,
                    connecting: Coroutine[Any, Any, owner_http.OwnerResponse]
                    ) -> owner_http.OwnerResponse:
        """The owner's response head, unless ``url`` stops owning ``partition`` first, or
        the client leaves (``ClientGoneError``: it held a connection to the owner, and its fd,
        for as long as the owner took).

        An owner that froze (a long pause, a host gone silent) holds the connection
        open and answers nothing; the group hands its partitions on after its
        session timeout, and the wait for the head ends then (``TimeoutError``: no
        byte came, so the caller retries against the new owner) rather than after
        ``read_s``, which a queued decision may need.
        """
        head = asyncio.ensure_future(connecting)
        gone = asyncio.ensure_future(disconnected(request.receive))
        try:
            while not head.done():
                moved = asyncio.ensure_future(
                    self.ownership.moved_on(self.ownership.generation, read_s))
                try:
                    await asyncio.wait((head, moved, gone),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    moved.cancel()
                if head.done():
                    break
                if gone.done():
                    raise ClientGoneError
                now = self.ownership.route(partition, forwarded=False)
                if moved.done() and not moved.cancelled() and moved.result() and (
                        now.local or now.url != url):
                    raise TimeoutError(f"{url} no longer owns partition {partition} and "
                                       "had not answered")
            return head.result()
        finally:
            gone.cancel()
            if not head.done():
                head.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await head


class ClientGoneError(Exception):
    """The client disconnected while its forward waited for the owner's answer."""


async def _owner_unavailable(response: owner_http.OwnerResponse) -> bool:
    """Whether a 503 is the owner's ``owner_unavailable`` (read and closed if so)."""
    if not response.header(b"content-type").startswith(PROBLEM_TYPE):
        return False
    body = await response.read()
    try:
        code = orjson.loads(body).get("code")
    except (orjson.JSONDecodeError, AttributeError):
        code = None
    if code == "owner_unavailable":
        return True
    response.replay = body
    return False


async def passed_on(upstream: owner_http.OwnerResponse,
                    on_left: Callable[[], None] | None = None, *,
                    silence_s: float | None = None) -> Response:
    """The owner's response for the client (step 3 of the module docstring): an event
    stream streamed through as it arrives (a client leaving cancels it, which closes the
    connection to the owner, and calls ``on_left``; silent for ``silence_s``, though the
    owner keeps a stream alive far more often, or broken off, the client's connection is
    aborted, not ended as if whole), anything else (a problem, a thread's state, a 204)
    read whole."""
    headers = [(k, v) for k, v in upstream.headers if k not in HOP_BY_HOP]
    if upstream.status == 200 and upstream.header(b"content-type").startswith(
            "text/event-stream"):
        outcome = StreamOutcome()

        def on_close() -> None:
            upstream.close()
            # broken: the owner broke off, not the client (it continues, Last-Event-ID)
            if on_left is not None and not (outcome.terminal or outcome.dropped
                                            or outcome.broken):
                on_left()

        response = EventStreamResponse(_whole(upstream, outcome, silence_s), on_close, outcome)
        response.raw_headers = headers
        return response
    body = upstream.replay if upstream.replay is not None else await upstream.read()
    answer = Response(body, status_code=upstream.status)
    answer.raw_headers = headers
    if upstream.status != 204 and upstream.status >= 200:
        answer.raw_headers.append((b"content-length", str(len(body)).encode("ascii")))
    return answer


async def _whole(upstream: owner_http.OwnerResponse, outcome: StreamOutcome,
                 silence_s: float | None) -> AsyncIterator[bytes]:
    """The owner's stream, marking ``outcome.terminal`` once the owner ended it (its body
    came whole: the run's end, or the owner's own end of the stream), ``outcome.broken``
    when it broke off."""
    async for piece in upstream.body(silence_s):
        yield piece
    outcome.terminal = not upstream.broken
    outcome.broken = upstream.broken
