"""What the service requires of request headers: one ``Authorization``, JSON bodies.

Two refusals a browser-facing JSON API owes its callers:

- more than one ``Authorization`` header is a ``400 duplicate_header``,
  whether authentication is on or off and before it runs: which of two
  credentials counts is the kind of question proxies and servers answer
  differently, so none is picked (``SingleHeaders``, the outermost
  middleware). The same for ``Last-Event-ID``: which of two positions a
  stream resumes from is no less ambiguous;
- a JSON route takes a body only as ``application/json`` or
  ``application/*+json`` (parameters such as ``charset`` allowed):
  anything else, or no ``Content-Type`` on ``POST /agents/{agent}``, is a
  ``415 unsupported_media_type`` before the body is read
  (``require_json``). Besides telling a client what it got wrong, this is
  what keeps a cross-site page from starting runs with a "simple" request
  (``text/plain``, a form), which a browser sends without asking the
  server first. A cancel has no body, so it needs no ``Content-Type``, but
  one that is not JSON is refused the same way.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from services.consumer.problems import InvalidInput, UnsupportedMediaType

SINGLE = (b"authorization", b"last-event-id")
"""Headers a request may carry at most once (names as the server hands them: lower case)."""


def is_json(content_type: str) -> bool:
    """Whether a ``Content-Type`` value names JSON (``application/json``, ``*/*+json``)."""
    media = content_type.partition(";")[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def require_json(content_type: str | None, *, required: bool) -> None:
    """Raise the 415 unless ``content_type`` is JSON (or absent and not ``required``)."""
    if content_type is None:
        if required:
            raise UnsupportedMediaType(
                "unsupported_media_type",
                "the body must be sent with 'Content-Type: application/json'")
        return
    if not is_json(content_type):
        shown = content_type if len(content_type) <= 80 else f"{content_type[:80]}…"
        raise UnsupportedMediaType(
            "unsupported_media_type",
            f"this route takes application/json, not {shown!r}")


class SingleHeaders:
    """ASGI middleware: a request with two of a ``SINGLE`` header gets the 400."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            seen: set[bytes] = set()
            for name, _ in scope["headers"]:
                if name in SINGLE:
                    if name in seen:
                        shown = "Authorization" if name == SINGLE[0] else "Last-Event-ID"
                        problem = InvalidInput(
                            "duplicate_header", f"the request has more than one {shown} "
                            "header; send exactly one")
                        await problem.response()(scope, receive, send)
                        return
                    seen.add(name)
        await self.app(scope, receive, send)
