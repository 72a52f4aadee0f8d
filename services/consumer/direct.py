"""The id routes called straight from the ASGI stack: FastAPI declares them, this serves them.

Two reasons, one mechanism. ``POST /agents/{agent}`` is the request every
run makes: between the app's middleware and that route's endpoint, FastAPI
spends more per request than the endpoint does before it publishes (under
load, about a tenth of the service's CPU): the exception middleware and exit
stacks, routing through every included route, a ``Request`` and a
``Response`` built for dependency injection the route does not use, and two
more wrappers around every ``send`` of the stream. And the thread routes
take ids that may hold a ``/`` (a pipeline child's thread id), which only
the raw path can carry (``%2F``; ``paths``): Starlette's router matches the
decoded path and never sees them.

``DirectRoutes`` is a plain ASGI middleware, installed innermost
(authentication and the header guards still run first), that matches a
request's method and raw path against the ``APIRoute``s it serves and, on a
match, awaits the very endpoint FastAPI would call, with the path parameters
as keyword arguments and a Starlette ``Request`` on the same scope. The
routes stay FastAPI routes: they are in the OpenAPI document, and any other
request (a method a route does not allow included) goes through FastAPI
unchanged. Endpoints take only their path parameters and the request, so
either way of reaching them does the same.

Errors keep their shape: a ``Problem`` becomes its response as
``problems.install``'s handler renders it (before any stream byte: an
endpoint raises only before it returns its response), and anything else
propagates to the app's server-error middleware, as it does through FastAPI.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from services.consumer.paths import PathTemplate, segments
from services.consumer.problems import Problem

Endpoint = Callable[..., Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Served:
    """One route served directly."""

    methods: frozenset[str]
    template: PathTemplate
    endpoint: Endpoint


class DirectRoutes:
    """ASGI middleware serving some APIRoutes by calling their endpoints."""

    def __init__(self, app: ASGIApp, routes: Sequence[Served]) -> None:
        self.app = app
        self.routes = tuple(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode("utf-8")
            parts = segments(raw)
            if parts is not None:
                method = scope["method"]
                for route in self.routes:
                    if method not in route.methods:
                        continue
                    params = route.template.match(parts)
                    if params is not None:
                        await self._serve(route, params, scope, receive, send)
                        return
        await self.app(scope, receive, send)

    @staticmethod
    async def _serve(route: Served, params: dict[str, str], scope: Scope, receive: Receive,
                     send: Send) -> None:
        scope["path_params"] = params
        request = Request(scope, receive, send)
        try:
            response = await route.endpoint(**params, request=request)
        except Problem as problem:
            response = problem.response()
        await response(scope, receive, send)


def install(app: FastAPI, router: APIRouter, endpoints: Sequence[Callable[..., object]]) -> None:
    """Serve ``router``'s APIRoutes of ``endpoints`` directly (call before ``auth.install``)."""
    served = []
    for endpoint in endpoints:
        route = next((r for r in router.routes
                      if isinstance(r, APIRoute) and r.endpoint is endpoint), None)
        if route is None:
            raise LookupError(f"{router!r} has no APIRoute for {endpoint!r}")
        served.append(Served(frozenset(route.methods or ()), PathTemplate.parse(route.path),
                             route.endpoint))
    app.add_middleware(DirectRoutes, routes=served)
