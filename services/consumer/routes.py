"""The HTTP routes: thin handlers over ``Relay`` (the OpenAPI document lists them).

Handlers validate what they are given, call the relay and return; every
error is a ``Problem`` raised for ``problems.install``'s handlers to render.
Who asks is ``request.state.principal`` (set by ``auth``; ``AGUI_PRINCIPAL``
when authentication is off), the tenant, and ``request.state.key_name``, its
key's name when it has one (a run request carries both; a cancel is
requested by ``tenant#name``); the thread routes read a thread only through
``relay.tenancy``, which answers another tenant's thread with a 404. The run
and thread routes are declared on ``served``, which ``direct`` serves and
the app never includes (one door: ``direct``'s docstring says why); their
endpoints take only their path parameters and the request, and check the
ids' length first (400 ``id_too_long``). A replay's logic is ``replay``'s.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from contracts.records import identity
from services.consumer.forward import Here
from services.consumer.headers import require_json
from services.consumer.limits import check_ids
from services.consumer.metrics import CONTENT_TYPE
from services.consumer.problems import PROBLEM_TYPE, NotFound
from services.consumer.relay import Relay
from services.consumer.replay import replay
from services.consumer.runs import read_body
from services.consumer.sse import EventStreamResponse
from services.consumer.views import CancelAccepted, ThreadView

served = APIRouter()
"""The run and thread routes: served by ``direct`` alone, never included in the app."""
router = APIRouter()
"""Everything else (health, readiness, metrics), included in the app as FastAPI routes."""

_PROBLEM = {"content": {PROBLEM_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
_SSE = {"content": {"text/event-stream": {"schema": {"type": "string"}}},
        "description": "The run's AG-UI events, one JSON object per `data:` frame"}


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {**_PROBLEM, "description": "Problem"} for s in statuses}


def _relay(request: Request) -> Relay:
    relay: Relay = request.app.state.relay
    return relay


def _principal(request: Request) -> str:
    """Who sent the request: the API key's tenant, else ``AGUI_PRINCIPAL``."""
    principal = getattr(request.state, "principal", None)
    return principal if isinstance(principal, str) else _relay(request).settings.principal


def _key_name(request: Request) -> str | None:
    """The name of the API key the request came with, when it has one."""
    name = getattr(request.state, "key_name", None)
    return name if isinstance(name, str) else None


def _ids(request: Request, thread_id: str, run_id: str | None = None) -> Relay:
    """The relay, once the path's ids are known not to be too long (400)."""
    relay = _relay(request)
    ids = {"threadId": thread_id} if run_id is None else {"threadId": thread_id, "runId": run_id}
    check_ids(relay.limits, ids)
    return relay


async def _at_owner(relay: Relay, request: Request, thread_id: str,
                    body: bytes | None = None) -> Response | None:
    """The owner's answer when another instance owns the thread's partition (``forward``);
    None: this instance serves it."""
    answer = await relay.forwarder.dispatch(request, relay.fanout.partition_of(thread_id),
                                            body=body)
    return None if isinstance(answer, Here) else answer


def _json(model: ThreadView | CancelAccepted, status: int = 200) -> Response:
    return Response(orjson.dumps(model.model_dump(mode="json", by_alias=True)),
                    status_code=status, media_type="application/json")


@served.post(
    "/agents/{agent}",
    summary="Run an agent (AG-UI over HTTP + SSE)",
    response_class=EventStreamResponse,
    status_code=200,
    responses={200: _SSE, **_problems(400, 404, 409, 410, 413, 415, 422, 503, 504)},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/RunAgentInput"}}}}},
)
async def run_agent(agent: str, request: Request) -> Response:
    """Publish the input as a RunRequest; stream the run once the gatekeeper admits it."""
    return await _relay(request).runs.start_run(agent, request, _principal(request),
                                                _key_name(request))


@served.get("/threads/{thread_id}", response_model=ThreadView,
            responses=_problems(400, 404), summary="A thread's status and open interrupts",
            description="A thread id holding `/` (a pipeline child's) is sent as `%2F`.")
async def get_thread(thread_id: str, request: Request) -> Response:
    relay = _ids(request, thread_id)
    if (owner := await _at_owner(relay, request, thread_id)) is not None:
        return owner
    state = await relay.tenancy.readable(thread_id, _principal(request), fresh=True)
    if state is None:
        raise NotFound("unknown_thread", f"no thread {thread_id!r} is known")
    return _json(ThreadView.of(state))


@served.get(
    "/threads/{thread_id}/runs/{run_id}/events",
    summary="Replay a run's events (SSE with `id:` = sequence number)",
    response_class=EventStreamResponse,
    status_code=200,
    responses={200: _SSE, 204: {"description": "Nothing after Last-Event-ID: the run ended"},
               **_problems(400, 404, 410, 503)},
    openapi_extra={"parameters": [{
        "name": "Last-Event-ID", "in": "header", "required": False,
        "schema": {"type": "string"},
        "description": "The last sequence number received; the replay starts after it"}]},
)
async def replay_run(thread_id: str, run_id: str, request: Request) -> Response:
    """Every event of the run already written, then live ones until the terminal event.

    With ``Last-Event-ID`` at or past a finished run's terminal event there
    is nothing to send: ``204`` at once, which also tells a browser's
    ``EventSource`` to stop reconnecting (a reconnect sends exactly that).
    Events after it that retention removed from the log: ``410 events_expired``.
    """
    relay = _ids(request, thread_id, run_id)
    if (owner := await _at_owner(relay, request, thread_id)) is not None:
        return owner
    return await replay(relay, thread_id, run_id, _principal(request),
                        request.headers.get("last-event-id"))


@served.post("/threads/{thread_id}/runs/{run_id}/cancel", status_code=202,
             response_model=CancelAccepted, responses=_problems(400, 404, 415, 503),
             summary="Ask the run's worker to stop it")
async def cancel_run(thread_id: str, run_id: str, request: Request) -> Response:
    relay = _ids(request, thread_id, run_id)
    require_json(request.headers.get("content-type"), required=False)
    body = await read_body(request, relay.settings.max_body_bytes)
    if (owner := await _at_owner(relay, request, thread_id, body)) is not None:
        return owner
    tenant = _principal(request)
    requested_by = identity(tenant, _key_name(request)) or tenant
    admitted = await relay.fanout.decided((thread_id, run_id), relay.tenancy.settle_s)
    state = await relay.tenancy.readable(thread_id, tenant, run_id)
    if not admitted:
        if state is None:
            raise NotFound("unknown_thread", f"no thread {thread_id!r} is known")
        known = {state.run_id, state.interrupted_run_id, *state.recent_run_ids}
        if run_id not in known:
            raise NotFound("unknown_run", f"thread {thread_id!r} has no run {run_id!r}")
    command = await relay.runs.cancel(thread_id, run_id, requested_by, origin="http")
    return _json(CancelAccepted(thread_id=thread_id, run_id=run_id, requested_by=requested_by,
                                requested_at=command.requested_at), 202)


@router.get("/healthz", summary="Liveness")
async def healthz(request: Request) -> Response:
    alive = _relay(request).alive
    return Response(orjson.dumps({"status": "ok" if alive else "failed"}),
                    status_code=200 if alive else 503, media_type="application/json")


@router.get("/readyz", summary="Readiness: broker reachable, topics present, fan-out assigned")
async def readyz(request: Request) -> Response:
    result = await _relay(request).readiness()
    body: dict[str, Any] = {"status": "ready" if result.ready else "not_ready",
                            "checks": result.checks}
    if result.detail:
        body["detail"] = result.detail
    return Response(orjson.dumps(body), status_code=200 if result.ready else 503,
                    media_type="application/json")


@router.get("/metrics", summary="Prometheus metrics",
            responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text"}},
            response_class=Response)
async def metrics(request: Request) -> Response:
    relay = _relay(request)
    await relay.sample_lag()
    return Response(relay.metrics.render(), media_type=CONTENT_TYPE)
