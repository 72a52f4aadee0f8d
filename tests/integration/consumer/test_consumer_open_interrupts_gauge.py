"""A consumer-service instance reports what its inbox index holds, never a false zero.

The README names the open interrupts as what every consumer instance holds in memory and
tells the operator to watch them. In a 30-minute soak, with 1,006 interrupts open (``GET
/interrupts`` listing them all on both instances), both instances' ``/metrics`` said
``agui_open_interrupts 0.0`` (and ``agui_expired_interrupts``,
``agui_threads_running_too_long`` 0.0): the gatekeeper's census gauges, registered in every
process and set only by a gatekeeper. Now an instance reports its index
(``agui_consumer_inbox_interrupts``, ``agui_consumer_inbox_tool_calls``) and leaves out the
census gauges no gatekeeper of its process sets.
"""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from ag_ui.core import Interrupt
from consumer_harness import Backstage, serving
from test_consumer_interrupts_broker import interrupted

from services.runtime import metrics as runtime_metrics
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

OPEN = 3


async def test_the_open_interrupts_an_instance_holds_are_not_reported_as_zero(
        kafka: KafkaSettings, backstage: Backstage, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_metrics, "census_published", False)  # no gatekeeper in this process
    async with serving(kafka) as app:
        for _ in range(OPEN):
            thread = f"oi-{uuid.uuid4().hex[:8]}"
            await backstage.write_state(interrupted(
                thread, "anonymous", Interrupt(id=f"i-{thread}", reason="tool_approval")),
                thread)
        for _ in range(200):
            listed = (await app.http.get("/interrupts")).json()["interrupts"]
            if len(listed) == OPEN:
                break
            await asyncio.sleep(0.05)
        metrics = (await app.http.get("/metrics")).text
    assert len(listed) == OPEN
    held = re.search(r"^agui_consumer_inbox_interrupts (\S+)$", metrics, re.M)
    assert held is not None
    assert float(held.group(1)) == OPEN
    assert re.search(r"^agui_consumer_inbox_tool_calls 0.0$", metrics, re.M)
    census = re.findall(r"^(agui_open_interrupts|agui_expired_interrupts|agui_threads\b)",
                        metrics, re.M)
    assert census == [], f"census gauges no gatekeeper here sets: {census}"
