"""The inbox page's files, served as they are, before authentication.

``/inbox`` is ``index.html`` and ``/inbox/<name>`` a file of the built
front end (``services/consumer/inbox/dist``, written by ``make install``,
never committed). They are served *outside* ``BearerAuth`` on purpose: a
browser cannot attach a bearer token to a page it navigates to, and the
files hold no data — only code. Every call the page then makes to the API
carries the key the person typed once (kept in ``sessionStorage``), and
goes through authentication like any other request. Only flat names of the
build directory are served (no ``/`` or ``..``: nothing else on the disk
is reachable); GET and HEAD only. A missing build is a ``503 inbox_not_built``
problem saying how to build it.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from starlette.responses import FileResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from services.consumer.problems import MethodNotAllowed, NotFound, Unavailable

DIST = Path(__file__).parent / "inbox" / "dist"
PREFIX = "/inbox"
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".map": "application/json", ".png": "image/png",
          ".svg": "image/svg+xml"}
CSP = ("default-src 'self'; script-src 'self' 'unsafe-eval'; img-src 'self' data:; "
       "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
"""Only the page's own files. ``unsafe-eval``: ajv compiles each responseSchema into a
validator function at run time (``new Function``), which is how the form validates."""
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": CSP,
           "Referrer-Policy": "no-referrer"}


def resolve(path: str, dist: Path = DIST) -> Path | None:
    """The file ``path`` names under ``dist`` (``/inbox`` is index.html), else None."""
    if path in (PREFIX, PREFIX + "/"):
        return dist / "index.html"
    name = path[len(PREFIX) + 1:]
    if not path.startswith(PREFIX + "/") or not _NAME.match(name) or ".." in name:
        return None
    return dist / name


class InboxStatic:
    """ASGI middleware answering ``/inbox`` paths from the build directory."""

    def __init__(self, app: ASGIApp, dist: Path | None = None) -> None:
        self.app = app
        self.dist = dist or DIST

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != PREFIX and not path.startswith(PREFIX + "/"):
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await MethodNotAllowed(f"{scope['method']} is not allowed here",
                                   ["GET", "HEAD"]).response()(scope, receive, send)
            return
        target = resolve(path, self.dist)
        if not (self.dist / "index.html").is_file():
            problem = Unavailable("inbox_not_built", "the inbox page is not built: run "
                                  "`make install` (npm run build in services/consumer/inbox)")
            await problem.response()(scope, receive, send)
            return
        if target is None or not target.is_file():
            await NotFound("not_found", f"no file {path!r}").response()(scope, receive, send)
            return
        media = _TYPES.get(target.suffix, "application/octet-stream")
        await FileResponse(target, media_type=media, headers=HEADERS)(scope, receive, send)


def install(app: FastAPI) -> None:
    """Serve the inbox files (call after ``auth.install``: outside authentication)."""
    app.add_middleware(InboxStatic)
