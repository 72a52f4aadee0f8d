"""A pipeline's parent that gives up on a child cancels it (gatekeeper, worker and consumer
service as processes, the operator CLI to look at the threads).

``Delegation.call(within_s=...)`` ended the parent with a ``RUN_ERROR`` once the
child had run too long, but cancelled the child only when the parent itself was
cancelled: the child's thread stayed ``running`` until its worker stopped, and no
later run on it could start (found by probing).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from ops_support import one_worker_system, run_cli

from services.cli.ops.agui_http import run_agent
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
AGENTS = "never=delegating_agents:never,impatient=delegating_agents:impatient"


@pytest.fixture
async def stack(kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[tuple[KafkaSettings, str]]:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap,
                             topic_prefix=f"dg{uuid.uuid4().hex[:10]}", partitions=2)
    await ensure_topics(settings, ("never", "impatient"))
    async with one_worker_system(settings, tmp_path, AGENTS, HERE) as url:
        yield settings, url


async def running(settings: KafkaSettings, prefix: str) -> set[str]:
    listed = await run_cli(settings, "threads", "--status", "running", "--json")
    return {r["threadId"] for r in listed.json_lines() if r["threadId"].startswith(prefix)}


async def test_a_child_run_the_parent_gave_up_on_is_cancelled(
        stack: tuple[KafkaSettings, str]) -> None:
    settings, url = stack
    thread = f"t-imp-{uuid.uuid4().hex[:6]}"
    body = {"threadId": thread, "runId": f"{thread}-run-1", "state": {}, "tools": [],
            "context": [], "forwardedProps": {}, "messages": []}
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        reply = await run_agent(client, "impatient", body)
    assert (reply.terminal or {}).get("type") == "RUN_ERROR"
    assert "did not end within 3s" in str((reply.terminal or {}).get("message"))
    async with asyncio.timeout(30):
        while await running(settings, f"{thread}/"):
            await asyncio.sleep(0.5)
