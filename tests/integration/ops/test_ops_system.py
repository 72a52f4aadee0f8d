"""The operator commands against the whole system: gatekeeper, producer workers, consumer.

Real processes on the real broker: ``demo`` walks its three scenes through the
consumer service; ``resume`` and ``cancel`` act on runs of the sample agents;
the two-agent pipeline runs its parent and child in separate worker processes,
with the child's interrupt carried up, answered (or, expired, cancelled) at the
top and routed down.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from ops_support import Service, run_cli, services, wait_ready

from deploy.kafka import launcher
from services.cli.ops.agui_http import RunReply, run_agent
from services.kafka.admin import ensure_topics
from services.producer.delegation import CHILD_METADATA
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

SAMPLES = ("approval=services.producer.agents.approval:agent,"
           "scripted=services.producer.agents.scripted:agent")
PARENT = "pipeline_parent=services.producer.agents.pipeline_parent:agent"
CHILD = "pipeline_child=services.producer.agents.pipeline_child:agent"
AGENTS = ("approval", "scripted", "pipeline_parent", "pipeline_child")


@dataclass
class System:
    settings: KafkaSettings
    url: str


@pytest.fixture(scope="module")
async def system(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> AsyncIterator[System]:
    """Gatekeeper, one worker for the samples, one for each pipeline agent, the consumer.

    Shared by this module's tests (each uses its own threads) to start the five
    processes once.
    """
    tmp_path = tmp_path_factory.mktemp("system")
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap,
                             topic_prefix=f"sys{uuid.uuid4().hex[:10]}", partitions=4)
    await ensure_topics(settings, AGENTS)
    port = launcher.free_port()
    every = ",".join((SAMPLES, PARENT, CHILD))
    started = (
        Service("services.gatekeeper", settings, tmp_path),
        Service("services.producer", settings, tmp_path / "samples", AGUI_AGENTS=SAMPLES),
        Service("services.producer", settings, tmp_path / "parent", AGUI_AGENTS=PARENT),
        Service("services.producer", settings, tmp_path / "child", AGUI_AGENTS=CHILD),
        Service("services.consumer", settings, tmp_path, AGUI_AGENTS=every,
                AGUI_HTTP_PORT=str(port)),
    )
    for sub in ("samples", "parent", "child"):
        (tmp_path / sub).mkdir()
    url = f"http://127.0.0.1:{port}"
    async with services(*started):
        await wait_ready(url, started[-1])
        await started[0].wait_for_log("assigned partitions")
        yield System(settings, url)


def new_input(thread: str, text: str, forwarded: Any = None) -> dict[str, Any]:
    return {"threadId": thread, "runId": f"{thread}-run-1", "state": {}, "tools": [],
            "context": [], "forwardedProps": forwarded or {},
            "messages": [{"id": f"{thread}-u1", "role": "user", "content": text}]}


async def post(system: System, agent: str, run_input: dict[str, Any]) -> RunReply:
    async with httpx.AsyncClient(base_url=system.url, timeout=60.0) as client:
        return await run_agent(client, agent, run_input)


def types_of(lines: list[dict[str, Any]]) -> list[str]:
    return [line["value"].get("type") or line["value"].get("verdict") for line in lines]


async def test_demo_tours_the_running_system(system: System) -> None:
    result = await run_cli(system.settings, "demo", "--url", system.url)
    assert result.code == 0, result.stdout[-4000:] + result.stderr
    for needle in ("An approval, answered", "HTTP 422 interrupt_expired",
                   "HTTP 422 uncovered_interrupts", "DECISION rejected", "That was the tour"):
        assert needle in result.stdout, needle


async def test_resume_answers_a_real_approval_and_follows_the_run(system: System) -> None:
    first = await post(system, "approval", new_input("t-approve", "Clean up please."))
    (interrupt,) = first.interrupts
    result = await run_cli(system.settings, "resume", "t-approve", "--resolve",
                           f'{interrupt["id"]}={{"approved": true}}', "--json")
    assert result.code == 0, result.stderr
    lines = result.json_lines()
    kinds = types_of(lines)
    assert kinds[1] == "admitted"
    assert kinds[2] == "RUN_STARTED"
    assert kinds[-1] == "RUN_FINISHED"
    assert lines[-1]["value"].get("outcome", {"type": "success"})["type"] == "success"
    shown = await run_cli(system.settings, "threads", "show", "t-approve", "--json")
    (doc,) = shown.json_lines()
    assert [r["outcome"] for r in doc["runs"]] == ["interrupt", "success"]
    assert doc["state"]["status"] == "idle"


async def test_cancel_stops_a_running_run(system: System) -> None:
    script = {"script": {"text": "thinking", "delayMs": 60_000}}
    run = asyncio.create_task(post(system, "scripted", new_input("t-slow", "go", script)))
    for _ in range(100):
        listed = await run_cli(system.settings, "threads", "--status", "running", "--json")
        if any(r["threadId"] == "t-slow" for r in listed.json_lines()):
            break
        await asyncio.sleep(0.2)
    result = await run_cli(system.settings, "cancel", "t-slow", "--follow", "--json")
    assert result.code == 0, result.stderr
    assert result.json_lines()[-1]["value"]["outcome"] == {"type": "cancelled"}
    reply = await asyncio.wait_for(run, 30)
    assert (reply.terminal or {}).get("outcome") == {"type": "cancelled"}


async def test_pipeline_child_interrupt_is_answered_at_the_top(system: System) -> None:
    first = await post(system, "pipeline_parent", new_input("t-pipe", "the Q3 report"))
    (carried,) = first.interrupts
    assert carried["id"] == "review/sign-off"
    child = carried["metadata"][CHILD_METADATA]
    assert (child["agent"], child["interruptId"]) == ("pipeline_child", "sign-off")
    child_thread = child["threadId"]
    assert re.fullmatch(r"t-pipe/review-[0-9a-f]{16}", child_thread)
    child_runs = await run_cli(system.settings, "threads", "show", child_thread, "--json")
    (child_doc,) = child_runs.json_lines()
    assert child_doc["runs"][0]["parentRunId"] == "t-pipe-run-1"
    assert child_doc["state"]["status"] == "interrupted"

    result = await run_cli(system.settings, "resume", "t-pipe", "--resolve",
                           'review/sign-off={"approved": true}', "--json")
    assert result.code == 0, result.stderr
    finished = result.json_lines()[-1]["value"]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["result"]["review"] == {"published": True, "signOff": "resolved"}
    text = "".join(line["value"].get("delta", "") for line in result.json_lines())
    assert "Signed off: published." in text
    child_after = await run_cli(system.settings, "threads", "show", child_thread, "--json")
    (after,) = child_after.json_lines()
    assert [r["outcome"] for r in after["runs"]] == ["interrupt", "success"]
    assert after["runs"][1]["resume"] == ["sign-off=resolved"]


async def test_pipeline_expired_child_interrupt_is_cancelled_from_the_top(
    system: System
) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    first = await post(system, "pipeline_parent",
                       new_input("t-late", "the Q4 report", {"childExpiresAt": past}))
    (carried,) = first.interrupts
    assert carried["expiresAt"] == past
    child_thread = carried["metadata"][CHILD_METADATA]["threadId"]
    listed = await run_cli(system.settings, "threads", "--expired", "--json")
    assert {"t-late", child_thread} <= {r["threadId"] for r in listed.json_lines()}
    late = await run_cli(system.settings, "resume", "t-late", "--resolve",
                         'review/sign-off={"approved": true}')
    assert late.code == 1
    assert "interrupt_expired" in late.stderr
    result = await run_cli(system.settings, "resume", "t-late", "--cancel-expired", "--json")
    assert result.code == 0, result.stderr
    finished = result.json_lines()[-1]["value"]
    assert finished["result"]["review"] == {"published": False, "signOff": "cancelled"}
    child_after = await run_cli(system.settings, "threads", "show", child_thread, "--json")
    (after,) = child_after.json_lines()
    assert after["runs"][1]["resume"] == ["sign-off=cancelled"]
    assert after["state"]["status"] == "idle"


async def test_cancelling_the_parent_cancels_the_child_run(system: System) -> None:
    slow = {"childDelayMs": 60_000}
    run = asyncio.create_task(post(system, "pipeline_parent",
                                   new_input("t-stop", "the budget", slow)))
    for _ in range(150):
        listed = await run_cli(system.settings, "threads", "--status", "running", "--json")
        running = {r["threadId"] for r in listed.json_lines()}
        children = [t for t in running if t.startswith("t-stop/review-")]
        if "t-stop" in running and children:
            (child_thread,) = children
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the parent and its child never ran together")
    result = await run_cli(system.settings, "cancel", "t-stop", "--follow", "--json")
    assert result.code == 0, result.stderr
    assert result.json_lines()[-1]["value"]["outcome"] == {"type": "cancelled"}
    reply = await asyncio.wait_for(run, 30)
    assert (reply.terminal or {}).get("outcome") == {"type": "cancelled"}
    for _ in range(100):  # the child is cancelled by the parent's delegation, a moment later
        shown = await run_cli(system.settings, "threads", "show", child_thread, "--json")
        (doc,) = shown.json_lines()
        if doc["runs"][-1]["outcome"] != "open":
            break
        await asyncio.sleep(0.2)
    assert doc["runs"][-1]["outcome"] == "cancelled"
    assert doc["state"]["status"] == "idle"
