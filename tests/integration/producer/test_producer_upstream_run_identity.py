"""Which upstream run becomes the relay's, and how it ends, over a real broker.

The upstream is this file's own FastAPI app on a loopback port (one behaviour per
path), hosted by an in-process worker as ``name=http://...`` entries, as in
``test_producer_upstream``. What the relay's client reads is what the worker wrote
on ``events``.

* ``/late_error``: ``RUN_FINISHED`` success, then the ``RUN_ERROR`` of a failure that
  surfaced while flushing (AG-UI 1.0 rule 36: the consumer MUST then treat the run as
  failed): the run ends with that ``RUN_ERROR``, its code namespaced.
* ``/replay``: one stream carrying an earlier run (its own runId, an interrupt
  outcome), then the requested run (rule 38: replay is the usual case; rule 64: the
  requested run echoes the input's runId): the earlier run is skipped, the requested
  one taken, and no stale interrupt is left open on the thread.
* ``/foreign``: boundary events naming another thread and run: refused
  ``upstream_protocol``, the message naming both.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from producer_harness import Relay, first_input, in_process_worker

from services.kafka.admin import ensure_topics
from services.producer import checkpoint as cp
from services.producer.worker import Worker
from services.runtime.settings import KafkaSettings
from tests.asgi_server import served

pytestmark = pytest.mark.integration

SSE = "text/event-stream"


def frame(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def app() -> FastAPI:
    served_app = FastAPI()

    @served_app.post("/{path}")
    async def answer(path: str, request: Request) -> Response:
        body = orjson.loads(await request.body())
        ids = {"threadId": body["threadId"], "runId": body["runId"]}
        text = [{"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "saved"},
                {"type": "TEXT_MESSAGE_END", "messageId": "m1"}]
        if path == "late_error":
            events = [{"type": "RUN_STARTED", **ids}, *text,
                      {"type": "RUN_FINISHED", **ids, "outcome": {"type": "success"}},
                      {"type": "RUN_ERROR", "code": "flush_failed",
                       "message": "writing to the ledger failed after success was reported"}]
        elif path == "replay":
            old = {"threadId": body["threadId"], "runId": "earlier-run"}
            events = [{"type": "RUN_STARTED", **old},
                      {"type": "MESSAGES_SNAPSHOT",
                       "messages": [{"id": "u0", "role": "user", "content": "earlier"}]},
                      {"type": "RUN_FINISHED", **old, "outcome": {
                          "type": "interrupt",
                          "interrupts": [{"id": "stale-1", "reason": "answered_long_ago"}]}},
                      {"type": "RUN_STARTED", **ids}, *text,
                      {"type": "RUN_FINISHED", **ids, "outcome": {"type": "success"}}]
        elif path == "foreign":
            other = {"threadId": "someone-elses-thread", "runId": "someone-elses-run"}
            events = [{"type": "RUN_STARTED", **other}, *text,
                      {"type": "RUN_FINISHED", **other, "outcome": {"type": "success"}}]
        else:
            return JSONResponse({"title": f"no behaviour {path}"}, status_code=404)

        async def stream() -> AsyncIterator[bytes]:
            for event in events:
                yield frame(event)
        return StreamingResponse(stream(), media_type=SSE)

    return served_app


@contextlib.asynccontextmanager
async def bridged(kafka: KafkaSettings, **agents: str) -> AsyncIterator[Worker]:
    """A worker hosting ``agents`` (name → path of this file's upstream)."""
    async with served(app()) as port:
        await ensure_topics(kafka, tuple(agents))
        async with in_process_worker(kafka, ",".join(
                f"{name}=http://127.0.0.1:{port}/{path}" for name, path in agents.items())
                ) as worker:
            yield worker


async def test_a_late_run_error_after_run_finished_ends_the_run_failed(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with bridged(kafka, up_late="late_error"):
        view = await relay.run("up_late", first_input("t-late", "late-1"))
    assert view.types.count("RUN_STARTED") == 1
    # the upstream said the run failed: the relay's client must not read a success
    assert view.types[-1] == "RUN_ERROR", (view.types, view.terminal)
    assert "RUN_FINISHED" not in view.types
    assert view.terminal["code"] == "upstream.flush_failed"
    assert "writing to the ledger failed" in view.terminal["message"]
    view.assert_conformant()


async def test_a_replayed_run_ahead_of_the_requested_one_is_not_taken_for_it(
        kafka: KafkaSettings, relay: Relay) -> None:
    async with bridged(kafka, up_replay="replay") as worker:
        view = await relay.run("up_replay", first_input("t-replay", "replay-1"))
        state = worker.store.get("t-replay")
    assert state is not None
    assert view.outcome == {"type": "success"}, (
        f"the replayed run's outcome became run replay-1's: {view.terminal}")
    assert [i.id for i in cp.open_interrupts(state)] == []
    assert view.text() == "saved"
    # the replayed run's restated history is not published as this run's
    assert "MESSAGES_SNAPSHOT" not in view.types
    view.assert_conformant()


async def test_boundary_events_naming_another_thread_and_run_are_refused(
        kafka: KafkaSettings, relay: Relay) -> None:
    """AG-UI 1.0 rule 64 (MUST): a run's boundary events carry the input's threadId, and
    the requested run echoes the input's runId. These named another thread's run."""
    async with bridged(kafka, up_foreign="foreign"):
        view = await relay.run("up_foreign", first_input("t-foreign", "foreign-1"))
    assert view.terminal.get("code") == "upstream_protocol", view.terminal
    assert "someone-elses-thread" in view.terminal["message"]
    assert "t-foreign" in view.terminal["message"]
    assert "saved" not in view.text()
