"""HTTP problems: the one place an exception becomes a response.

Every error the consumer service answers with is ``application/problem+json``
(RFC 9457) with the members ``type``, ``title``, ``status``, ``detail``,
``code`` and ``interruptIds`` (the last omitted when empty), plus the
extension members a problem carries (``field`` and ``limit`` of a broken
input limit, ``limit_problem``). Routes raise; ``install`` registers the
handlers that render; the HTTP protocol (``protocol``) writes the ones it
answers itself (431, 421, 408, 400) in the same shape and with the same titles
(``runtime.http_protocol.Refusal``). The tree::

    Problem                       status from the subclass
    ├── InvalidInput              400 invalid_json / invalid_input / invalid_header /
    │                                 id_too_long / json_too_deep / duplicate_header /
    │                                 invalid_host (no Host on HTTP/1.1, or two)
    ├── Unauthorized              401 unauthorized (with ``WWW-Authenticate: Bearer``)
    ├── NotFound                  404 unknown_agent / unknown_thread / unknown_run
    ├── RequestTimeout            408 request_timeout (head or body too slow)
    ├── MethodNotAllowed          405 method_not_allowed (with ``Allow``)
    ├── Gone                      410 events_expired (a replay's next events removed by retention)
    ├── Rejected                  the gatekeeper's rejection: status by code, ``REJECTIONS``
    ├── PayloadTooLarge           413 payload_too_large
    ├── UnsupportedMediaType      415 unsupported_media_type
    ├── Misdirected               421 unknown_host (``hosts``: DNS rebinding)
    ├── HeadersTooLarge           431 headers_too_large
    ├── Unavailable               503 not_ready (without a wait to name), inbox_not_built
    │   └── RetryLater            503 broker_unavailable / not_ready / too_many_streams /
    │                                 replay_busy / busy /
    │                                 thread_store_unavailable / agent_lookup_deferred
    │                                 (with ``Retry-After``)
    │       └── OwnerUnavailable  503 owner_unavailable
    └── DecisionTimeout           504 decision_timeout

FastAPI's own request validation errors (path/query parameters) become 400
``invalid_input`` too, so no error leaves in FastAPI's default shape.

A gatekeeper rejection's status comes from one table, ``REJECTIONS``: every
``RejectionCode`` has its row (a unit test fails on a code without one, and
``Rejected`` refuses a code it cannot place rather than guess a 400). To add
a rejection code:

1. add it to ``RejectionCode`` in ``contracts/records.py`` and regenerate
   the schemas (``make contracts``);
2. give it its status and title in ``REJECTIONS`` below;
3. decide it in the gatekeeper's pure rules (``services/gatekeeper/rules.py``,
   or ``intake.py`` for a check that needs no thread), with a unit test;
4. if it is a resume rule the CLI can set aside, a row in
   ``services/cli/ops/resume_plan.py``'s ``SET_ASIDE``; if its status is new
   for ``POST /agents/{agent}``, add it to that route's documented
   responses (``routes.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from contracts import Decision, RejectionCode
from contracts.limits import FIELD_SHOWN, LimitExceeded
from services.kafka.clients import KafkaError

PROBLEM_TYPE = "application/problem+json"
TYPE_BASE = "urn:agui-relay:problem:"

log = logging.getLogger(__name__)

_BAD = (400, "Rejected")
_CONFLICT = (409, "Conflict")
"""About the thread's current state."""
_INTERRUPT_RULE = (422, "Interrupt rule broken")
"""A resume that breaks an interrupt rule."""

REJECTIONS: dict[RejectionCode, tuple[int, str]] = {
    "invalid_input": _BAD,
    "key_mismatch": _BAD,
    "duplicate_run_id": _CONFLICT,
    "thread_busy": _CONFLICT,
    "duplicate_entry": _INTERRUPT_RULE,
    "unknown_interrupt": _INTERRUPT_RULE,
    "uncovered_interrupts": _INTERRUPT_RULE,
    "interrupt_expired": _INTERRUPT_RULE,
    "answer_at_parent": _CONFLICT,
}
"""Each rejection code's HTTP status and title. ``key_mismatch`` never leaves as itself:
``tenancy.rejection`` answers it as the unknown thread it must look like."""
UNCODED = "rejected"
"""The code of a rejecting decision that carries none (no gatekeeper writes one): 400."""


class Problem(Exception):  # noqa: N818 - RFC 9457 names it "problem"
    """An error answered as a problem document."""

    status = 500
    title = "Internal error"

    def __init__(self, code: str, detail: str, interrupt_ids: Sequence[str] = (), *,
                 extra: Mapping[str, object] | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.interrupt_ids = list(interrupt_ids)
        self.extra = dict(extra) if extra else {}
        """Extension members (RFC 9457 section 3.2), added after the standard ones."""

    def body(self) -> dict[str, object]:
        """The problem document."""
        doc: dict[str, object] = {
            "type": TYPE_BASE + self.code,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        }
        if self.interrupt_ids:
            doc["interruptIds"] = self.interrupt_ids
        for name, value in self.extra.items():
            doc.setdefault(name, value)
        return doc

    def encoded(self) -> bytes:
        """The problem document's bytes."""
        return orjson.dumps(self.body())

    def response(self) -> Response:
        """The HTTP response carrying it."""
        return Response(self.encoded(), status_code=self.status, media_type=PROBLEM_TYPE)


class InvalidInput(Problem):
    status = 400
    title = "Invalid input"


class Unauthorized(Problem):
    """No valid bearer token (RFC 6750): the challenge goes in ``WWW-Authenticate``."""

    status = 401
    title = "Unauthorized"

    def __init__(self, detail: str, *, invalid_token: bool) -> None:
        super().__init__("unauthorized", detail)
        self.challenge = 'Bearer realm="agui-relay"'
        if invalid_token:
            self.challenge += ', error="invalid_token"'

    def response(self) -> Response:
        response = super().response()
        response.headers["WWW-Authenticate"] = self.challenge
        return response


class NotFound(Problem):
    status = 404
    title = "Not found"


class RequestTimeout(Problem):
    status = 408
    title = "Request timeout"


class Gone(Problem):
    status = 410
    title = "Gone"


class PayloadTooLarge(Problem):
    status = 413
    title = "Payload too large"


class UnsupportedMediaType(Problem):
    status = 415
    title = "Unsupported media type"


class Misdirected(Problem):
    status = 421
    title = "Misdirected request"


class TooManyRequests(Problem):
    """A tenant past a limit on what it holds open (RFC 6585): no ``Retry-After``, since
    only the tenant's own answers free it."""

    status = 429
    title = "Too many requests"


class HeadersTooLarge(Problem):
    status = 431
    title = "Request header fields too large"


class Unavailable(Problem):
    status = 503
    title = "Service unavailable"


class RetryLater(Unavailable):
    """Unavailable for a while: ``Retry-After`` says when to ask again."""

    def __init__(self, code: str, detail: str, retry_after_s: int = 1) -> None:
        super().__init__(code, detail)
        self.retry_after = str(max(1, retry_after_s))

    def response(self) -> Response:
        response = super().response()
        response.headers["Retry-After"] = self.retry_after
        return response


class OwnerUnavailable(RetryLater):
    """The thread's partition has no reachable owner now (a rebalance, a dead instance;
    ``forward``)."""

    def __init__(self, detail: str, retry_after_s: int = 1) -> None:
        super().__init__("owner_unavailable", detail, retry_after_s)


class DecisionTimeout(Problem):
    status = 504
    title = "Decision timeout"


class MethodNotAllowed(Problem):
    """A known path asked with a method it does not take: ``Allow`` lists the ones it does."""

    status = 405
    title = "Method not allowed"

    def __init__(self, detail: str, allow: Sequence[str]) -> None:
        super().__init__("method_not_allowed", detail)
        self.allow = ", ".join(sorted(allow))

    def response(self) -> Response:
        response = super().response()
        response.headers["Allow"] = self.allow
        return response


class Rejected(Problem):
    """The gatekeeper refused the request; status and title from ``REJECTIONS``."""

    def __init__(self, code: RejectionCode | None, detail: str,
                 interrupt_ids: Sequence[str] = ()) -> None:
        super().__init__(code or UNCODED, detail, interrupt_ids)
        self.status, self.title = _BAD if code is None else REJECTIONS[code]

    @classmethod
    def from_decision(cls, decision: Decision) -> Rejected:
        """The problem for a rejecting decision."""
        return cls(decision.code, decision.message, decision.interrupt_ids or ())


def limit_problem(exceeded: LimitExceeded) -> InvalidInput:
    """The 400 of a broken input limit, naming the field (cut as the detail cuts it: a
    path is made of client keys) and the limit."""
    field = exceeded.field
    if len(field) > FIELD_SHOWN:
        field = f"{field[:FIELD_SHOWN]}…"
    return InvalidInput(exceeded.code, exceeded.detail,
                        extra={"field": field, "limit": exceeded.limit})


async def _problem(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response()


async def _validation(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "(request)"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return InvalidInput("invalid_input", "; ".join(parts) or "invalid request").response()


async def _http(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    problem = Problem(code, str(exc.detail))
    problem.status, problem.title = exc.status_code, str(exc.detail)
    return problem.response()


BROKER_RETRY_S = 5
"""``Retry-After`` of a ``503 broker_unavailable``."""


def kafka_unreachable(exc: Exception) -> RetryLater:
    """``503 broker_unavailable`` for a route that could not read what it needs from Kafka
    (a replay, a thread's audit, while the broker is down). They answered ``500
    internal_error`` with a traceback, and the connection was dropped after it without
    ``Connection: close`` (found by probing)."""
    return RetryLater("broker_unavailable", f"could not read from Kafka: {exc}",
                      retry_after_s=BROKER_RETRY_S)


async def _kafka(request: Request, exc: Exception) -> Response:
    log.warning("%s %s: could not read from Kafka: %s", request.method, request.url.path, exc)
    return kafka_unreachable(exc).response()


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return Problem("internal_error", "the service failed to handle the request").response()


def install(app: FastAPI) -> None:
    """Register the handlers on ``app`` (coroutines: Starlette would run plain functions
    in its thread pool, a thread hop for every 404)."""
    app.add_exception_handler(Problem, _problem)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(KafkaError, _kafka)
    app.add_exception_handler(Exception, _unexpected)
