"""The upstream AG-UI service of the upstream benchmark: a streaming agent with no thinking.

``python -m bench.upstream_app PORT`` serves ``POST /agui``: each run is
``RUN_STARTED``, one assistant message of ``forwardedProps.events``
``TEXT_MESSAGE_CONTENT`` deltas (500 when absent), ``TEXT_MESSAGE_END`` and
``RUN_FINISHED``, every event its own SSE frame written as soon as it is
made, as a token-streaming agent does. Nothing sleeps, so what the benchmark
measures is the cost of carrying the events, not the agent: called directly
it is the floor, reached through the relay it is an ``AGUI_AGENTS`` entry
``name=http://127.0.0.1:PORT/agui``. Same uvicorn settings as the consumer
service.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import StreamingResponse

from services.consumer.app import NO_FASTAPI_TELEMETRY

DEFAULT_EVENTS = 500
DELTA = "token "


def run_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event of one run of ``body`` (a RunAgentInput as wire JSON), in order."""
    thread, run = body["threadId"], body["runId"]
    count = int((body.get("forwardedProps") or {}).get("events", DEFAULT_EVENTS))
    message = f"m-{run}"
    return [{"type": "RUN_STARTED", "threadId": thread, "runId": run},
            {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"},
            *({"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": DELTA}
              for _ in range(count)),
            {"type": "TEXT_MESSAGE_END", "messageId": message},
            {"type": "RUN_FINISHED", "threadId": thread, "runId": run,
             "outcome": {"type": "success"}}]


def upstream_app() -> FastAPI:
    app = FastAPI(telemetry=NO_FASTAPI_TELEMETRY)

    @app.post("/agui")
    async def run(request: Request) -> StreamingResponse:
        events = run_events(orjson.loads(await request.body()))

        async def frames() -> AsyncIterator[bytes]:
            for event in events:
                yield b"data: " + orjson.dumps(event) + b"\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    return app


def main() -> None:
    port = int(sys.argv[1])
    uvicorn.run(upstream_app(), host="127.0.0.1", port=port, access_log=False,
                log_level="warning", http="httptools", loop="uvloop", backlog=4096)


if __name__ == "__main__":
    main()
