"""HTTP problems: the one place an exception becomes a response.

Every error the consumer service answers with is ``application/problem+json``
(RFC 9457) with the members ``type``, ``title``, ``status``, ``detail``,
``code`` and ``interruptIds`` (the last omitted when empty), plus the
extension members a problem carries (``field`` and ``limit`` of a broken
input limit, ``limit_problem``). Routes raise; ``install`` registers the
handlers that render; the HTTP protocol (``protocol``) writes the two it
answers itself (431, 408) from the same classes. The tree::

    Problem                       status from the subclass
    ├── InvalidInput              400 invalid_json / invalid_input / invalid_header /
    │                                 id_too_long / json_too_deep / duplicate_header
    ├── Unauthorized              401 unauthorized (with ``WWW-Authenticate: Bearer``)
    ├── NotFound                  404 unknown_agent / unknown_thread / unknown_run
    ├── RequestTimeout            408 request_timeout (head or body too slow)
    ├── Rejected                  409 or 422: the gatekeeper's rejection, by code
    ├── PayloadTooLarge           413 payload_too_large
    ├── UnsupportedMediaType      415 unsupported_media_type
    ├── HeadersTooLarge           431 headers_too_large
    ├── Unavailable               503 not_ready / too_many_streams / broker_unavailable
    └── DecisionTimeout           504 decision_timeout

FastAPI's own request validation errors (path/query parameters) become 400
``invalid_input`` too, so no error leaves in FastAPI's default shape.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from contracts import Decision
from contracts.limits import FIELD_SHOWN, LimitExceeded

PROBLEM_TYPE = "application/problem+json"
TYPE_BASE = "urn:agui-relay:problem:"

log = logging.getLogger(__name__)

CONFLICT_CODES = frozenset({"thread_busy", "duplicate_run_id"})
"""Rejections about the thread's current state: 409 Conflict."""
INTERRUPT_CODES = frozenset(
    {"duplicate_entry", "unknown_interrupt", "uncovered_interrupts", "interrupt_expired"}
)
"""Rejections of a resume that breaks an interrupt rule: 422."""


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


class PayloadTooLarge(Problem):
    status = 413
    title = "Payload too large"


class UnsupportedMediaType(Problem):
    status = 415
    title = "Unsupported media type"


class HeadersTooLarge(Problem):
    status = 431
    title = "Request header fields too large"


class Unavailable(Problem):
    status = 503
    title = "Service unavailable"


class DecisionTimeout(Problem):
    status = 504
    title = "Decision timeout"


class Rejected(Problem):
    """The gatekeeper refused the request; status follows the rejection code."""

    def __init__(self, code: str, detail: str, interrupt_ids: Sequence[str] = ()) -> None:
        super().__init__(code, detail, interrupt_ids)
        if code in INTERRUPT_CODES:
            self.status, self.title = 422, "Interrupt rule broken"
        elif code in CONFLICT_CODES:
            self.status, self.title = 409, "Conflict"
        else:
            self.status, self.title = 400, "Rejected"

    @classmethod
    def from_decision(cls, decision: Decision) -> Rejected:
        """The problem for a rejecting decision."""
        return cls(decision.code or "rejected", decision.message, decision.interrupt_ids or ())


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


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return Problem("internal_error", "the service failed to handle the request").response()


def install(app: FastAPI) -> None:
    """Register the handlers on ``app`` (coroutines: Starlette would run plain functions
    in its thread pool, a thread hop for every 404)."""
    app.add_exception_handler(Problem, _problem)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
