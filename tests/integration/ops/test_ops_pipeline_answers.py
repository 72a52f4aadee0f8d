"""A pipeline's question is offered, and answered, once: at the parent.

Real processes on the real broker: a gatekeeper, one worker per pipeline agent
(``pipeline_parent`` delegates its review to ``pipeline_child``), the consumer
service; the operator CLI to look at the threads. The child's sign-off is
carried up to the parent; the inbox (``GET /interrupts``) listed it twice, on
the parent and on the child thread, and answering the child's copy (as the
inbox's "Resume thread" did) ran the child past its question while the parent
still waited on it, and the parent's own answer, routed down afterwards, was
refused (found by probing). A child its parent no longer waits on is listed by
``agui-relay stuck`` as an orphan, with the command that cancels it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import RunAgentInput
from ops_support import pipeline_system, run_cli

from contracts import RunRequest, encode
from services.cli.ops.agui_http import RunReply, run_agent
from services.cli.ops.kafka_io import publish
from services.producer.delegation import CHILD_METADATA
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

@dataclass
class Pipeline:
    settings: KafkaSettings
    url: str


@pytest.fixture
async def pipeline(kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Pipeline]:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap,
                             topic_prefix=f"pa{uuid.uuid4().hex[:10]}", partitions=2)
    async with pipeline_system(settings, tmp_path) as url:
        yield Pipeline(settings, url)


def run_input(thread: str, run_id: str, **members: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": run_id, "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [], **members}


SIGN_OFF = [{"interruptId": "sign-off", "status": "resolved", "payload": {"approved": True}}]


async def post(url: str, agent: str, body: dict[str, Any]) -> RunReply:
    async with httpx.AsyncClient(base_url=url, timeout=90.0) as client:
        return await run_agent(client, agent, body)


async def offered(url: str, prefix: str) -> list[tuple[str, str]]:
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        listed = (await client.get("/interrupts")).json()["interrupts"]
    return sorted((i["threadId"], i["id"]) for i in listed if i["threadId"].startswith(prefix))


async def stuck(settings: KafkaSettings) -> dict[str, Any]:
    result = await run_cli(settings, "stuck", "--json")
    assert result.code == 0, result.stderr
    (doc,) = result.json_lines()
    return doc


async def carried_up(pipeline: Pipeline, prefix: str) -> tuple[str, str]:
    """A new thread whose parent run carried its child's question up: (thread, child)."""
    thread = f"{prefix}-{uuid.uuid4().hex[:6]}"
    first = await post(pipeline.url, "pipeline_parent", run_input(
        thread, f"{thread}-run-1",
        messages=[{"id": f"{thread}-u1", "role": "user", "content": "the report"}]))
    (carried,) = first.interrupts
    return thread, carried["metadata"][CHILD_METADATA]["threadId"]


async def test_a_pipeline_question_is_offered_once_and_answered_at_the_parent(
        pipeline: Pipeline) -> None:
    thread, child_thread = await carried_up(pipeline, "t-inbox")
    assert await offered(pipeline.url, thread) == [(thread, "review/sign-off")]

    listed = await run_cli(pipeline.settings, "threads", "--json")
    rows = {r["threadId"]: r for r in listed.json_lines()}
    assert (rows[thread]["childOf"], rows[child_thread]["childOf"]) == (None, thread)
    assert rows[child_thread]["status"] == "interrupted"
    counted = await stuck(pipeline.settings)
    assert (counted["openInterrupts"], counted["childInterrupts"]) == (1, 1)
    assert counted["orphans"] == []  # its parent waits on it

    # what the inbox's "Resume thread" sent for the child's card: refused, naming the parent
    direct = await post(pipeline.url, "pipeline_child", run_input(
        child_thread, f"{thread}-direct", resume=SIGN_OFF))
    assert direct.status == 409, direct
    assert (direct.problem or {}).get("code") == "answer_at_parent"
    assert f"{thread!r}" in str((direct.problem or {}).get("detail"))
    refused = await run_cli(pipeline.settings, "resume", child_thread, "--resolve",
                            'sign-off={"approved": true}')
    assert refused.code != 0
    assert "answer_at_parent" in refused.stderr
    assert f"agui-relay resume -- {thread}" in refused.stderr

    top = await run_cli(pipeline.settings, "resume", thread, "--resolve",
                        'review/sign-off={"approved": true}', "--json")
    assert top.code == 0, top.stderr
    ended = top.json_lines()[-1]["value"]
    assert ended["type"] == "RUN_FINISHED", ended
    assert ended["result"]["review"] == {"published": True, "signOff": "resolved"}
    shown = await run_cli(pipeline.settings, "threads", "show", child_thread, "--json")
    (child,) = shown.json_lines()
    assert [r["outcome"] for r in child["runs"]] == ["interrupt", "success"]
    assert await offered(pipeline.url, thread) == []


async def test_an_orphaned_child_is_listed_by_stuck_and_its_command_cancels_it(
        pipeline: Pipeline) -> None:
    """A child run whose parent is gone (here: its parent thread never had a state, as if
    the parent's run was lost before it carried the question up) ends interrupted. Nobody
    is offered its question; ``stuck`` lists it with the command that cancels it."""
    parent = f"t-gone-{uuid.uuid4().hex[:6]}"
    child_thread = f"{parent}/review-{uuid.uuid4().hex[:16]}"
    # what a parent's worker sends for its child (only a delegation makes a child: a
    # client's own parentRunId does not), then the parent is gone
    child = RunRequest(request_id=f"req-{uuid.uuid4()}", agent="pipeline_child",
                       input=RunAgentInput.model_validate(run_input(
                           child_thread, f"{parent}-c1", parentRunId=f"{parent}-run-1",
                           messages=[{"id": f"{parent}-u1", "role": "user",
                                      "content": "the report"}])),
                       submitted_at=datetime.now(UTC), policy="delegation")
    await publish(pipeline.settings, pipeline.settings.topics.requests, child_thread,
                  encode(child))
    deadline = asyncio.get_running_loop().time() + 60
    while not (orphans := (await stuck(pipeline.settings))["orphans"]):
        assert asyncio.get_running_loop().time() < deadline, "the child never ended interrupted"
        await asyncio.sleep(0.5)
    assert await offered(pipeline.url, parent) == []

    (orphan,) = orphans
    command = f"agui-relay resume --cancel-all -- {child_thread}"
    assert orphan == {"threadId": child_thread, "agent": "pipeline_child",
                      "runId": f"{parent}-c1", "parentThreadId": parent,
                      "parentRunId": f"{parent}-run-1", "parentStatus": None,
                      "openInterrupts": ["sign-off"], "command": command}
    table = await run_cli(pipeline.settings, "stuck")
    assert command in " ".join(table.stdout.split())

    words = command.split()[1:]  # the command as pasted, --json among its options
    cancelled = await run_cli(pipeline.settings, *words[:1], "--json", *words[1:])
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.json_lines()[-1]["value"]["type"] == "RUN_FINISHED"
    after = await stuck(pipeline.settings)
    assert after["orphans"] == []
    assert after["childInterrupts"] == 0


async def test_a_client_naming_a_parent_run_of_its_own_does_not_answer_a_child(
        pipeline: Pipeline) -> None:
    """Only a delegation answers a child: a client's own ``parentRunId`` proves nothing (a
    probe got past the rule with a made-up one, and the pipeline broke)."""
    thread, child_thread = await carried_up(pipeline, "t-forge")
    forged = await post(pipeline.url, "pipeline_child", run_input(
        child_thread, f"{thread}-direct", resume=SIGN_OFF, parentRunId="made-up"))
    assert forged.status == 409, forged
    assert (forged.problem or {}).get("code") == "answer_at_parent"
    assert await offered(pipeline.url, thread) == [(thread, "review/sign-off")]


async def test_a_child_cancelled_on_its_own_thread_leaves_its_parent_answerable(
        pipeline: Pipeline) -> None:
    """A cancel-only resume on the child (the operator's way out) while its parent still
    waits on it: the parent's answer routed down later finds the child moved past its
    question, sends nothing and takes the run that ended after it (it ended the whole
    pipeline in an agent error before, found by probing)."""
    thread, child_thread = await carried_up(pipeline, "t-cancel")
    cancelled = await post(pipeline.url, "pipeline_child", run_input(
        child_thread, f"{thread}-direct",
        resume=[{"interruptId": "sign-off", "status": "cancelled"}]))
    assert cancelled.status == 200
    top = await post(pipeline.url, "pipeline_parent", run_input(
        thread, f"{thread}-run-2", resume=[{"interruptId": "review/sign-off",
                                            "status": "resolved",
                                            "payload": {"approved": True}}]))
    assert top.terminal is not None
    assert top.terminal["type"] == "RUN_FINISHED", top.terminal
    shown = await run_cli(pipeline.settings, "threads", "show", child_thread, "--json")
    (child,) = shown.json_lines()
    assert len(child["runs"]) == 2  # the question and the operator's cancel: nothing more
