"""The expiry policy on a two-agent pipeline (``pipeline_parent`` → ``pipeline_child``):
gatekeeper with ``AGUI_ON_EXPIRY=cancel``, one worker per agent, the consumer service.

The child's sign-off is carried up with the same ``expiresAt``, so the gatekeeper
expires both threads: the child's on its own (its run finishes ``signOff: cancelled``),
and the parent's, whose expiry run routes the cancel down to a child that has moved
past it. Found by probing: the routed-down cancel was refused (``unknown_interrupt``)
and the parent's expiry run ended ``RUN_ERROR``; it must finish as a cancel sent from
the top by hand does (``test_pipeline_expired_child_interrupt_is_cancelled_from_the_top``).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from ops_support import pipeline_system, run_cli

from services.cli.ops.agui_http import run_agent
from services.producer.delegation import CHILD_METADATA
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def show(settings: KafkaSettings, thread: str) -> dict[str, Any]:
    shown = await run_cli(settings, "threads", "show", thread, "--json")
    (doc,) = shown.json_lines()
    return doc


async def test_the_expiry_policy_cancels_an_expired_pipeline_at_the_top(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap,
                             topic_prefix=f"px{uuid.uuid4().hex[:10]}", partitions=2)
    async with pipeline_system(settings, tmp_path, AGUI_ON_EXPIRY="cancel") as url:
        thread = f"t-exp-{uuid.uuid4().hex[:6]}"
        soon = (datetime.now(UTC) + timedelta(seconds=6)).isoformat()
        async with httpx.AsyncClient(base_url=url, timeout=90.0) as client:
            first = await run_agent(client, "pipeline_parent", {
                "threadId": thread, "runId": f"{thread}-run-1", "state": {}, "tools": [],
                "context": [], "forwardedProps": {"childExpiresAt": soon},
                "messages": [{"id": f"{thread}-u1", "role": "user", "content": "the report"}]})
        (carried,) = first.interrupts
        child_thread = carried["metadata"][CHILD_METADATA]["threadId"]
        async with asyncio.timeout(60):
            while True:
                doc = await show(settings, thread)
                if len(doc["runs"]) >= 2 and doc["runs"][-1]["outcome"] != "open":
                    break
                await asyncio.sleep(0.5)
        child = await show(settings, child_thread)
        assert doc["runs"][-1]["outcome"] == "success", (doc["runs"][-1], child["runs"])
        assert [r["outcome"] for r in child["runs"]] == ["interrupt", "success"], child["runs"]
        assert child["state"]["status"] == "idle"
