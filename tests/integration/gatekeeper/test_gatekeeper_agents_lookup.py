"""The gatekeeper finds agents by asking for their dispatch topics, not by listing the cluster.

It lists the cluster once, at start. An agent deployed later is looked up
when a request first names it, before that request is decided: with the
periodic refresh an hour away, the first request is admitted, not refused
as unknown. A name found missing is asked about again after a second. An
agent whose topic is deleted is dropped at the next refresh (by name).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from gatekeeper_harness import Topics, run_request

from services.gatekeeper.agents import MISS_RETRY_S
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_an_agent_deployed_after_start_is_admitted_on_its_first_request(
        kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any]) -> None:
    processor = await in_process(kafka, agents_refresh_s=3600)
    assert "late" not in processor.state.agents.names
    refused = await topics.decide(run_request("q-before", "t-late", "r0", agent="late"))
    assert (refused.verdict, refused.code) == ("rejected", "invalid_input")
    assert "no agent 'late' is deployed" in refused.message

    await ensure_topics(kafka, ("late",))
    await asyncio.sleep(MISS_RETRY_S)  # the miss is remembered for this long
    admitted = await topics.decide(run_request("q-after", "t-late", "r1", agent="late"))
    assert admitted.verdict == "admitted"
    assert "late" in processor.state.agents.names


async def test_an_agent_whose_topic_is_deleted_is_refused_after_the_refresh(
        kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any],
        delete_topics: Callable[..., Awaitable[None]]) -> None:
    await ensure_topics(kafka, ("doomed",))
    processor = await in_process(kafka, agents_refresh_s=0.5)
    assert "doomed" in processor.state.agents.names  # listed at start
    admitted = await topics.decide(run_request("q-1", "t-doomed", "r1", agent="doomed"))
    assert admitted.verdict == "admitted"

    await delete_topics(kafka.topics.dispatch("doomed"))
    for _ in range(100):
        if "doomed" not in processor.state.agents.names:
            break
        await asyncio.sleep(0.2)
    assert "doomed" not in processor.state.agents.names
    refused = await topics.decide(run_request("q-2", "t-doomed2", "r2", agent="doomed"))
    assert (refused.verdict, refused.code) == ("rejected", "invalid_input")
    assert "scripted" in processor.state.agents.names  # the others stay
