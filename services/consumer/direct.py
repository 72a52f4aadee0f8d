"""The run route called straight from the ASGI stack: FastAPI declares it, this serves it.

``POST /agents/{agent}`` is the request every run makes. Between the app's
middleware and that route's endpoint, FastAPI spends more per request than
the endpoint does before it publishes (under load, about a tenth of the
service's CPU): the exception middleware and exit stacks, routing through
every included route, a ``Request`` and a ``Response`` built for dependency
injection the route does not use, and two more wrappers around every
``send`` of the stream. ``DirectRoute`` is a plain ASGI middleware, installed
innermost (authentication still runs first), that matches a request with
the ``APIRoute``'s own matcher and, on a full match, awaits the very endpoint
FastAPI would call, with the same path parameter and a Starlette ``Request``
on the same scope. The route stays a FastAPI route: it is in the OpenAPI
document, and any other request (a method it does not allow included) goes
through FastAPI unchanged.

Errors keep their shape: a ``Problem`` becomes its response as
``problems.install``'s handler renders it (before any stream byte: the
endpoint raises only before it returns its response), and anything else
propagates to the app's server-error middleware, as it does through FastAPI.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from services.consumer.problems import Problem

Endpoint = Callable[[str, Request], Awaitable[Response]]


class DirectRoute:
    """ASGI middleware serving ``route`` (one path parameter) by calling its endpoint."""

    def __init__(self, app: ASGIApp, route: APIRoute, param: str) -> None:
        self.app = app
        self.route = route
        self.param = param
        self.endpoint: Endpoint = route.endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match, child = self.route.matches(scope)
            if match is Match.FULL:
                scope.update(child)
                request = Request(scope, receive, send)
                try:
                    response = await self.endpoint(child["path_params"][self.param], request)
                except Problem as problem:
                    response = problem.response()
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def install(app: FastAPI, router: APIRouter, endpoint: Callable[..., object],
            param: str) -> None:
    """Serve ``router``'s APIRoute of ``endpoint`` directly (call before ``auth.install``)."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.endpoint is endpoint:
            app.add_middleware(DirectRoute, route=route, param=param)
            return
    raise LookupError(f"{router!r} has no APIRoute for {endpoint!r}")
