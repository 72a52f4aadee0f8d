"""A run requested while the broker is down: the answer says what may still happen.

With the broker down, ``POST /agents/{agent}`` answers ``503 broker_unavailable``
once ``AGUI_DECISION_TIMEOUT_S`` has passed without the broker's acknowledgement.
The request is not withdrawn: it stays in the consumer service's producer and,
depending on how long the broker stays down, is written once it is back, then
decided and run. The answer said "could not publish", and a client retrying as
told got ``409 duplicate_run_id`` for its own run (found by probing). Now it says
the run may still be decided and run, how to follow it or try again, and when
(``Retry-After``), which it did not say either.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from faults.harness import Stack, StackConfig, unique_prefix
from faults.load import run_input
from faults.outages import OwnBroker

pytestmark = pytest.mark.faults

ACK_TIMEOUT_S = 4.0
JSON_SSE = {"content-type": "application/json", "accept": "text/event-stream"}


async def test_a_run_requested_while_the_broker_is_down_is_answered_what_may_happen(
        own_broker: OwnBroker, tmp_path: Path) -> None:
    config = StackConfig(env={"AGUI_DECISION_TIMEOUT_S": str(ACK_TIMEOUT_S)})
    async with Stack(own_broker.bootstrap, unique_prefix("ou"), tmp_path, config) as stack, \
            httpx.AsyncClient(timeout=60.0) as client:
        url = stack.consumer_urls[0]
        await own_broker.stop()
        tag = uuid.uuid4().hex[:8]
        thread_id, run_id = f"outage-{tag}", f"run-{tag}"
        body = orjson.dumps(run_input(thread_id, run_id, script={"text": "hello"}))
        first = await client.post(f"{url}/agents/scripted", content=body, headers=JSON_SSE)
        await own_broker.start_again()
        await stack.probe(90.0)
        problem = first.json()
        assert (first.status_code, problem["code"]) == (503, "broker_unavailable"), problem
        assert first.headers["retry-after"] == "5"
        assert "may still be decided and run once the broker is back" in problem["detail"]
        assert "under a new runId" in problem["detail"]
        assert "GET /threads/{threadId}" in problem["detail"]
