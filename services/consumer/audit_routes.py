"""``GET /threads/{thread_id}/audit``: every interrupt of a thread, raised then answered.

The audit trail auditors and agents ask for (who answered which interrupt,
when, with what), rebuilt from the topics by ``services.agui.audit``: the
thread's partitions of ``events`` and ``decisions`` are read as the inbox's
history route reads them (``read_thread``, at most ``HISTORY_READS`` at
once, ``503 busy`` past that). Served by ``direct`` from the raw path on its
own ``served`` router, so a thread id holding ``/`` is asked as ``%2F``;
tenancy is every thread route's rule (``relay.tenancy.readable``): another
tenant's thread is the same ``404 unknown_thread`` as an id nobody used,
and it is refused before anything is read.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from services.agui.audit import audit
from services.consumer import direct
from services.consumer.interrupt_routes import read_history
from services.consumer.routes import _problems
from services.consumer.tenancy import unknown_thread

served = APIRouter()
"""The audit route: served by ``direct`` alone, never included in the app."""


@served.get("/threads/{thread_id}/audit", responses=_problems(400, 404, 503),
            summary="Every interrupt of a thread: raised, then answered or expired",
            description="In the order raised: `interruptId`, `status` (open, resolved, "
                        "cancelled, expired), `runId`, `agent`, `raisedAt` (ms), `reason`, "
                        "`message`, `toolCallId`, `responseSchema`, `expiresAt`, and "
                        "`answer` {status, runId, by, at (ms), digest (sha256 of the "
                        "payload's canonical JSON), policy}. A thread id holding `/` is "
                        "sent as `%2F`.")
async def thread_audit(thread_id: str, request: Request) -> Response:
    state, found = await read_history(request, thread_id)
    if state is None and not found.events and not found.decisions:
        raise unknown_thread(thread_id)
    entries = audit(found.events, found.decisions)
    body = {"threadId": thread_id, "interrupts": [e.wire() for e in entries]}
    return Response(orjson.dumps(body), media_type="application/json")


def install(app: FastAPI) -> None:
    """Serve the route (after ``interrupt_routes.install``: it reads the inbox's slots)."""
    direct.install(app, served)
