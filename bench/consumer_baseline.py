"""The no-Kafka baseline of the consumer benchmark: the same agent behind plain FastAPI.

``python -m bench.consumer_baseline PORT`` serves ``POST /agents/scripted``
with the producer's own ``Runner`` driving the ``scripted`` sample agent
in-process and its events framed straight onto the SSE response — the
minimal AG-UI endpoint, with the same uvicorn settings as the consumer
service, so the difference the benchmark measures is what Kafka, the
gatekeeper and the worker add.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import uvicorn
from ag_ui.core import RunAgentInput
from fastapi import FastAPI, Request
from starlette.responses import StreamingResponse

from services.consumer.app import NO_FASTAPI_TELEMETRY
from services.producer.agents.scripted import agent as scripted
from services.producer.resume import plan_resume
from services.producer.runner import EventRecord, Runner, RunReport

_DONE = b""


class QueueSink:
    """A RunSink that hands each record's bytes to the response."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    async def send(self, record: EventRecord) -> None:
        await self.queue.put(record.value)

    async def send_terminal(self, record: EventRecord, report: RunReport) -> None:
        await self.queue.put(record.value)
        await self.queue.put(_DONE)

    def refusal(self, report: RunReport) -> None:
        """Nothing is refused: no broker, no record limit, no checkpoint."""


def baseline_app() -> FastAPI:
    app = FastAPI(telemetry=NO_FASTAPI_TELEMETRY)  # as the consumer service runs it

    @app.post("/agents/scripted")
    async def run(request: Request) -> StreamingResponse:
        run_input = RunAgentInput.model_validate_json(await request.body())
        sink = QueueSink()
        runner = Runner(scripted, run_input, plan_resume(run_input, []), sink,
                        agent_name="scripted")
        task = asyncio.create_task(runner.run())

        async def body() -> AsyncIterator[bytes]:
            while (value := await sink.queue.get()) != _DONE:
                yield b"data: " + value + b"\n\n"
            await task

        return StreamingResponse(body(), media_type="text/event-stream")

    return app


def main() -> None:
    port = int(sys.argv[1])
    uvicorn.run(baseline_app(), host="127.0.0.1", port=port, access_log=False,
                log_level="warning", http="httptools", loop="uvloop", backlog=4096)


if __name__ == "__main__":
    main()
