"""A fan-out pipeline on real processes (gatekeeper, one worker, consumer service): a
resume runs no finished child again, and a child question too long to carry up
leaves no thread waiting.

Found by probing: resuming a parent whose first child asked a question ran its two
finished children a second time, on new child threads; a child question whose id was
at the id limit failed the parent and stayed open on the child for ever.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from ops_support import one_worker_system, run_cli

from services.cli.ops.agui_http import RunReply, run_agent
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
AGENTS = "fanout=delegating_agents:fanout,scripted=services.producer.agents.scripted:agent"


@dataclass
class Stack:
    settings: KafkaSettings
    url: str


@pytest.fixture(scope="module")
async def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[Stack]:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap,
                             topic_prefix=f"fo{uuid.uuid4().hex[:10]}", partitions=2)
    await ensure_topics(settings, ("fanout", "scripted"))
    async with one_worker_system(settings, tmp_path_factory.mktemp("fanout"), AGENTS,
                                 HERE) as url:
        yield Stack(settings, url)


def new_input(thread: str, forwarded: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": f"{thread}-run-1", "state": {}, "tools": [],
            "context": [], "forwardedProps": forwarded, "messages": []}


async def post(url: str, agent: str, run_input: dict[str, Any]) -> RunReply:
    async with httpx.AsyncClient(base_url=url, timeout=120.0) as client:
        return await run_agent(client, agent, run_input)


async def threads(settings: KafkaSettings, prefix: str) -> dict[str, str]:
    listed = await run_cli(settings, "threads", "--json")
    return {r["threadId"]: r["status"] for r in listed.json_lines()
            if r["threadId"].startswith(prefix)}


async def test_a_resumed_fan_out_runs_each_finished_child_once(stack: Stack) -> None:
    """c0 asks a question, c1 and c2 succeed; resumed with c0's answer, the parent's
    agent calls all three again: c0 is continued, c1 and c2 are read as they ended."""
    thread = f"t-fr-{uuid.uuid4().hex[:6]}"
    first = await post(stack.url, "fanout", new_input(thread, {"n": 3, "interrupting": [0]}))
    assert [i["id"] for i in first.interrupts] == ["c0/q"], first.terminal
    resumed = await run_cli(stack.settings, "resume", thread, "--resolve", 'c0/q={"ok": 1}',
                            "--json")
    assert resumed.code == 0, resumed.stderr
    finished = resumed.json_lines()[-1]["value"]
    assert finished["type"] == "RUN_FINISHED", finished
    assert finished["result"]["statuses"] == {"success": 3}
    children = sorted(t[len(thread) + 1:] for t in await threads(stack.settings, f"{thread}/"))
    per_key = {key: sum(c.startswith(f"{key}-") for c in children) for key in ("c0", "c1", "c2")}
    assert per_key == {"c0": 1, "c1": 1, "c2": 1}, f"child threads per key: {children}"
    for child in children[1:]:  # c1 and c2: one run each, the first run's
        shown = await run_cli(stack.settings, "threads", "show", f"{thread}/{child}", "--json")
        (doc,) = shown.json_lines()
        assert [r["outcome"] for r in doc["runs"]] == ["success"], (child, doc["runs"])
        assert doc["runs"][0]["runId"] in finished["result"]["childRuns"]


async def test_a_child_question_too_long_to_carry_up_leaves_no_thread_waiting(
        stack: Stack) -> None:
    """The child's question id is at AGUI_MAX_ID_LENGTH (256), valid on the child;
    carried up as ``c0/<id>`` it would be 259. The parent fails ``child_id_too_long``
    naming it, after cancelling the question in the child: every thread ends idle."""
    thread = f"t-li-{uuid.uuid4().hex[:6]}"
    reply = await post(stack.url, "fanout", new_input(
        thread, {"n": 1, "interrupting": [0], "questionId": "q" * 256}))
    assert (reply.terminal or {}).get("type") == "RUN_ERROR", reply.terminal
    assert (reply.terminal or {}).get("code") == "child_id_too_long", reply.terminal
    assert "q" * 256 in str((reply.terminal or {}).get("message"))
    rows = await threads(stack.settings, thread)
    assert len(rows) == 2, rows
    assert rows == dict.fromkeys(rows, "idle"), rows
