"""The front door of the run and thread routes: served from the ASGI stack, and only so.

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
request's method and raw path against the routes it serves and, on a match,
awaits the endpoint with the path parameters as keyword arguments and a
Starlette ``Request`` on the same scope; a served path asked with another
method is answered ``405 method_not_allowed`` with ``Allow``. Anything else
(any other path) goes on to FastAPI.

One door, chosen: the routes are declared on an ``APIRouter`` that is
*never included in the app* — ``install`` reads its ``APIRoute``s for their
methods, path and endpoint, and the app's OpenAPI document is built from
them too, so they are documented as FastAPI routes but FastAPI has no route
that could call their endpoints. Serving them through FastAPI alone would
give back the cost above and lose the raw path; keeping the ``APIRoute``
mounted as well left a second way in, through FastAPI's own stack (its
exception middleware, its validation, its 307 for a trailing slash), for
any request the two matchers disagree on. So a Problem an endpoint raises
is rendered here, by ``Problem.response`` (before any stream byte: an
endpoint raises only before it returns its response), and nowhere else;
anything else propagates to the app's server-error middleware. A path
FastAPI does not know is its 404 (``problems``), a trailing slash included.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from services.consumer.paths import PathTemplate, segments
from services.consumer.problems import (
    InvalidInput,
    MethodNotAllowed,
    Problem,
    kafka_unreachable,
)
from services.kafka.clients import KafkaError

log = logging.getLogger(__name__)

Endpoint = Callable[..., Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Served:
    """One route served directly."""

    methods: frozenset[str]
    template: PathTemplate
    endpoint: Endpoint


class DirectRoutes:
    """ASGI middleware serving some routes by calling their endpoints."""

    def __init__(self, app: ASGIApp, routes: Sequence[Served]) -> None:
        self.app = app
        self.routes = tuple(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode("utf-8")
            undecodable = False
            try:
                parts = segments(raw, errors="strict")
            except UnicodeDecodeError:
                parts, undecodable = segments(raw), True
            if parts is not None:
                method = scope["method"]
                allowed: set[str] = set()
                for route in self.routes:
                    params = route.template.match(parts)
                    if params is None:
                        continue
                    if undecodable:
                        bad = InvalidInput("invalid_request",
                                           "the path's ids are not UTF-8 once percent-decoded")
                        await bad.response()(scope, receive, send)
                        return
                    if method in route.methods:
                        await self._serve(route, params, scope, receive, send)
                        return
                    allowed |= route.methods
                if allowed:
                    refused = MethodNotAllowed(f"{method} is not allowed here", sorted(allowed))
                    await refused.response()(scope, receive, send)
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
        except KafkaError as exc:  # what it reads is on a broker that does not answer
            log.warning("%s %s: could not read from Kafka: %s", request.method,
                        request.url.path, exc)
            response = kafka_unreachable(exc).response()
        await response(scope, receive, send)


def served(router: APIRouter) -> list[Served]:
    """What ``router``'s routes serve (every one must be an ``APIRoute``)."""
    found = []
    for route in router.routes:
        if not isinstance(route, APIRoute):
            raise TypeError(f"{route!r} is not an APIRoute: it cannot be served directly")
        found.append(Served(frozenset(route.methods or ()), PathTemplate.parse(route.path),
                            route.endpoint))
    return found


def mounted_endpoints(routes: Sequence[BaseRoute]) -> Iterator[Callable[..., object]]:
    """The endpoints of every ``APIRoute`` FastAPI can reach in ``routes``, through included
    routers too (FastAPI keeps an included router as one route wrapping the original)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route.endpoint
        included = getattr(route, "original_router", None)
        if isinstance(included, APIRouter):
            yield from mounted_endpoints(included.routes)


def install(app: FastAPI, router: APIRouter) -> None:
    """Serve ``router``'s routes directly (call before ``auth.install``); ``router`` must
    not be included in ``app``: it is read, never mounted."""
    routes = served(router)
    endpoints = {r.endpoint for r in routes}
    if any(e in endpoints for e in mounted_endpoints(app.router.routes)):
        raise ValueError("a directly served route is included in the app as well")
    app.add_middleware(DirectRoutes, routes=routes)
