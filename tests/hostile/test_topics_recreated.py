"""A topic deleted under the running relay, then created again: bounded logs meanwhile,
service again within a minute of its return.

What an operator (or a script) might do: delete a topic, see the relay
complain, and create it again with ``agui-relay topics create``. While
``events`` was missing, aiokafka's "Topic … not found in cluster metadata"
was logged about 2,700 times a second by the consumer service and the
worker (0.7 MB of log a second); once it was back, each service's group took
its partitions back only at aiokafka's next periodic metadata refresh, five
minutes later, and meanwhile every request was answered ``503
owner_unavailable`` blaming a shared ``AGUI_ADVERTISED_URL`` (for
``events``) or ``504 decision_timeout`` (for ``requests``). Found by a probe
of topic changes under a running relay; each test runs its own ``agui-relay
up`` on its own topic prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

import httpx
import pytest
from faults.load import HttpRun, run_input

from hostile.client import Tenant, finished
from hostile.stack import TENANTS, UpStack
from services.cli.up import SAMPLE_AGENTS, agent_names
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_admin
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.hostile

BACK_WITHIN_S = 60.0
"""How long after a topic is created again a new run must be served (the five-minute
metadata refresh is what made it fail)."""
LOG_BYTES_LIMIT = 300_000
"""All services' logs, 15 s while ``events`` is missing (0.7 MB a second before)."""


async def delete_topic(settings: KafkaSettings, topic: str) -> None:
    admin = new_admin(settings, "test-delete-topic")
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def served_again(stack: UpStack, tenant: Tenant, tag: str) -> list[tuple[int, str | None]]:
    """New ``scripted`` runs, tried until one streams or ``BACK_WITHIN_S`` passed; what each
    try was answered (status, problem code)."""
    await ensure_topics(stack.settings, agent_names(SAMPLE_AGENTS))
    deadline = time.monotonic() + BACK_WITHIN_S
    answers: list[tuple[int, str | None]] = []
    result: HttpRun | None = None
    while time.monotonic() < deadline:
        tid = f"{tag}-{uuid.uuid4().hex[:8]}"
        result = await tenant.run("scripted", run_input(tid, f"{tid}-r1",
                                                        script={"text": "after"}), timeout_s=15)
        answers.append((result.status, (result.problem or {}).get("code")))
        if result.status == 200:
            finished(result, "success")
            break
        await asyncio.sleep(2.0)
    return answers


async def test_events_deleted_logs_a_little_and_serves_again_once_created(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    with UpStack(kafka_bootstrap, tmp_path).running() as stack:
        events = stack.settings.topics.events
        async with Tenant(stack.url, TENANTS["tenant-a"], timeout_s=20) as tenant:
            tid = f"del-{uuid.uuid4().hex[:8]}"
            finished(await tenant.run("scripted", run_input(tid, f"{tid}-r1",
                                                            script={"text": "before"})))
            # a run streaming across the deletion: the worker has events to write
            streaming = asyncio.create_task(tenant.run(
                "scripted", run_input(tid, f"{tid}-r2",
                                      script={"text": "long", "delayMs": 25_000}),
                timeout_s=60))
            await asyncio.sleep(2.0)
            await delete_topic(stack.settings, events)
            await asyncio.sleep(5.0)
            logs = stack.log_files()
            before = {name: path.stat().st_size for name, path in logs.items()}
            await asyncio.sleep(15.0)
            grown = {name: logs[name].stat().st_size - before[name] for name in logs}
            async with httpx.AsyncClient(timeout=2.0) as probe:
                ready = {name: (await probe.get(url)).status_code
                         for name, url in stack.readyz_urls().items()}
            streaming.cancel()
            with contextlib.suppress(BaseException):
                await streaming
            answers = await served_again(stack, tenant, "del")
    assert sum(grown.values()) < LOG_BYTES_LIMIT, (
        f"logs grew by {grown} bytes in 15 s while {events} was missing (readyz {ready})")
    assert ready["consumer"] == 503, ready
    assert answers, "no run tried"
    assert answers[-1][0] == 200, f"after {events} was created again: {answers}"


async def test_requests_deleted_is_decided_again_once_created(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    with UpStack(kafka_bootstrap, tmp_path).running() as stack:
        async with Tenant(stack.url, TENANTS["tenant-a"], timeout_s=20) as tenant:
            tid = f"rq-{uuid.uuid4().hex[:8]}"
            finished(await tenant.run("scripted", run_input(tid, f"{tid}-r1",
                                                            script={"text": "before"})))
            await delete_topic(stack.settings, stack.settings.topics.requests)
            await asyncio.sleep(8.0)
            answers = await served_again(stack, tenant, "rq")
    assert answers, "no run tried"
    assert answers[-1][0] == 200, (
        f"after {stack.settings.topics.requests} was created again: {answers}")

