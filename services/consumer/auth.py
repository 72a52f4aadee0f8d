"""Bearer-token authentication of the consumer service: who is asking.

``load_keys(settings)`` reads the API keys (``keys``); ``install(app,
settings, keys, registry)`` then, when there are any, wraps the app in
``BearerAuth``, a plain ASGI middleware (no
``BaseHTTPMiddleware``: streamed responses pass through untouched). For
every request it:

- lets ``/healthz`` and ``/readyz`` through (probes carry no credentials);
- lets ``/metrics`` through unless ``AGUI_METRICS_TOKEN`` is set, in which
  case that token, and only it, must be presented (a tenant's key does not
  open the process-wide metrics). Open by default because Prometheus
  scrapes by pod annotation and the metrics carry no ids and no secrets;
- otherwise wants ``Authorization: Bearer <token>`` naming a configured
  key (exactly one such header: two are refused before this middleware
  runs, with authentication on or off, by ``headers.SingleHeaders``), and
  answers a ``401`` problem with ``WWW-Authenticate: Bearer``
  before the app sees the request (so before the body is read);
- puts the key's tenant in ``request.state.principal`` and its name, when
  it has one, in ``request.state.key_name``: the routes publish them as
  ``RunRequest.principal`` and ``RunRequest.keyName``; ``tenancy`` checks
  thread ownership with the tenant alone (the keys of one tenant share its
  threads), while who answered is recorded as ``tenant#name``.

No keys configured means authentication is off (local development,
``make run``): a warning is logged at startup and every request acts as
``AGUI_PRINCIPAL`` (``anonymous``). Tokens are never logged: refusals are
counted (``agui_consumer_auth_failures_total{reason}``) and logged at DEBUG
with the method and path only.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from services.consumer.keys import SHORT_TOKEN, ApiKeys, Key, build, load
from services.consumer.problems import Unauthorized
from services.consumer.settings import ConsumerSettings

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
METRICS_PATH = "/metrics"


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class BearerAuth:
    """The ASGI middleware (see the module docstring)."""

    def __init__(self, app: ASGIApp, keys: ApiKeys | None, metrics_keys: ApiKeys | None,
                 failures: Counter) -> None:
        self.app = app
        self.keys = keys
        self.metrics_keys = metrics_keys
        self.failures = failures

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        keys = self.metrics_keys if scope["path"] == METRICS_PATH else self.keys
        if keys is None:
            await self.app(scope, receive, send)
            return
        token = bearer_token(_header(scope, b"authorization"))
        key = keys.key_for(token) if token is not None else None
        if key is None:
            reason = "missing" if token is None else "invalid"
            self.failures.labels(reason).inc()
            log.debug("refused %s %s: %s bearer token", scope["method"], scope["path"], reason)
            problem = Unauthorized(
                "this route needs 'Authorization: Bearer <API key>'" if token is None
                else "the bearer token is not a valid API key", invalid_token=token is not None)
            await problem.response()(scope, receive, send)
            return
        if keys is self.keys:
            state = scope.setdefault("state", {})
            state["principal"] = key.tenant
            if key.name is not None:
                state["key_name"] = key.name
        await self.app(scope, receive, send)


def document(doc: dict[str, Any], *, metrics_protected: bool) -> None:
    """Declare the bearer scheme in an OpenAPI document, and which operations are open."""
    doc.setdefault("components", {})["securitySchemes"] = {"bearerAuth": {
        "type": "http", "scheme": "bearer",
        "description": "An API key of AGUI_API_KEYS / AGUI_API_KEYS_FILE; it names the "
                       "tenant and, optionally, the key (tenant#name)"}}
    doc["security"] = [{"bearerAuth": []}]
    open_paths = OPEN_PATHS if metrics_protected else OPEN_PATHS | {METRICS_PATH}
    for path in open_paths:
        for operation in doc.get("paths", {}).get(path, {}).values():
            operation["security"] = []


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def load_keys(settings: ConsumerSettings) -> ApiKeys | None:
    """The configured API keys (None: authentication is off).

    Raises ``keys.KeyConfigError`` (naming the source and line, never a
    token) when the configuration cannot be read: better not to start than
    to start open.
    """
    return load(settings.api_keys.get_secret_value() if settings.api_keys else None,
                settings.api_keys_file)


def install(app: FastAPI, settings: ConsumerSettings, keys: ApiKeys | None,
            registry: CollectorRegistry) -> None:
    """Protect ``app`` with ``keys`` (and ``/metrics`` with AGUI_METRICS_TOKEN); say how."""
    metrics_keys = (build([(settings.metrics_token.get_secret_value(), Key("metrics"))])
                    if settings.metrics_token else None)
    if keys is None:
        log.warning("no API keys configured (AGUI_API_KEYS, AGUI_API_KEYS_FILE): "
                    "authentication is OFF and every request acts as %r; configure keys "
                    "before exposing this port", settings.principal)
    else:
        log.info("authentication on: %d API keys for %d tenants; /metrics %s",
                 len(keys.entries), len(keys.tenants),
                 "needs AGUI_METRICS_TOKEN" if metrics_keys else "is open")
        if keys.short:
            log.warning("API keys shorter than %d characters (guessable) for: %s",
                        SHORT_TOKEN, ", ".join(keys.short))
    if keys is None and metrics_keys is None:
        return
    failures = Counter("agui_consumer_auth_failures",
                       "Requests refused 401, by reason (missing or invalid bearer token)",
                       ["reason"], registry=registry)
    app.add_middleware(BearerAuth, keys=keys, metrics_keys=metrics_keys, failures=failures)
