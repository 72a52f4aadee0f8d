"""The FastAPI application factory of the consumer service.

``create_app(settings, kafka)`` builds an app whose lifespan starts the
instance's Kafka plumbing (``Relay``) before serving and stops it after,
behind the header guards (``headers``: one ``Authorization``, outermost) and
bearer-token authentication when API keys are configured (``auth``), with
the run, thread and interrupt routes served from the raw path by ``direct``
alone (they are not included in the app), and the inbox page's static files
outside authentication (``inbox_static``: they hold no data); the OpenAPI
document (``/openapi.json``) lists them with the app's own routes, and names
the AG-UI ``RunAgentInput`` body and the problem document every error uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ag_ui.core import RunAgentInput
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.telemetry import TelemetryConfig

from services.consumer import (
    audit_routes,
    auth,
    direct,
    inbox_static,
    interrupt_routes,
    problems,
)
from services.consumer.headers import SingleHeaders
from services.consumer.relay import Relay
from services.consumer.routes import router, served
from services.consumer.settings import ConsumerSettings
from services.runtime.settings import KafkaSettings, LimitSettings

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details, with agui-relay's code and interrupt ids",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string"}, "title": {"type": "string"},
        "status": {"type": "integer"}, "detail": {"type": "string"},
        "code": {"type": "string"},
        "interruptIds": {"type": "array", "items": {"type": "string"}},
        "field": {"type": "string",
                  "description": "id_too_long / json_too_deep: where, as a path (messages/3/id)"},
        "limit": {"type": "integer", "description": "id_too_long / json_too_deep: the limit"},
    },
}

NO_FASTAPI_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}
"""FastAPI's native OpenTelemetry stays off: the relay traces with W3C ``traceparent``
through Kafka and counts with Prometheus (``/metrics``). Left on, it asks the global
OpenTelemetry providers on every request, reading the environment each time: about 3%
of the service's CPU under load, for providers nobody configured."""


def create_app(settings: ConsumerSettings | None = None,
               kafka: KafkaSettings | None = None,
               limits: LimitSettings | None = None, *, url: str | None = None) -> FastAPI:
    """The consumer service (settings default to the environment; ``url``: the address
    other instances reach it at, when ``AGUI_ADVERTISED_URL`` does not say: ``server``)."""
    settings = settings or ConsumerSettings()
    kafka = kafka or KafkaSettings()
    keys = auth.load_keys(settings)
    relay = Relay(settings, kafka, authenticated=keys is not None, limits=limits,
                  url=settings.advertised_url or url or "")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await relay.start()
        try:
            yield
        finally:
            await relay.stop()

    app = FastAPI(title="agui-relay consumer service", version="0.1.0", lifespan=lifespan,
                  description="AG-UI 1.0 over HTTP/SSE, carried over Apache Kafka.",
                  telemetry=NO_FASTAPI_TELEMETRY)
    app.state.relay = relay
    problems.install(app)
    app.include_router(router)
    interrupt_routes.install(app, relay)
    audit_routes.install(app)
    direct.install(app, served)
    auth.install(app, settings, keys, relay.metrics.registry)
    inbox_static.install(app)
    app.add_middleware(SingleHeaders)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version,
                              description=app.description,
                              routes=[*served.routes, *interrupt_routes.served.routes,
                                      *audit_routes.served.routes,
                                      *app.routes])
            components = doc.setdefault("components", {}).setdefault("schemas", {})
            run_input = RunAgentInput.model_json_schema(
                by_alias=True, ref_template="#/components/schemas/{model}")
            components.update(run_input.pop("$defs", {}))
            components["RunAgentInput"] = run_input
            components["Problem"] = PROBLEM_SCHEMA
            problems_only(doc)
            if keys is not None:
                auth.document(doc, metrics_protected=settings.metrics_token is not None)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def problems_only(doc: dict[str, Any]) -> None:
    """Take FastAPI's own ``422`` (``HTTPValidationError``) out of the document: every error
    the service sends is a problem document (``problems``), and a 422 it never sends was
    documented on every route with a path parameter (found by probing)."""
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            answer = operation.get("responses", {}).get("422")
            if answer is not None and "application/problem+json" not in answer.get(
                    "content", {}):
                del operation["responses"]["422"]
    schemas = doc.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
