"""A Google ADK agent hosted in process by one line, driven by the reference client.

The worker hosts ``ag-ui-adk``'s ``ADKAgent`` as
``AGUI_AGENTS=refunds=tests.integration.producer.adk_agents:agent`` (an ADK
``LlmAgent`` with a scripted model and two tools that need the user's
confirmation; no LLM, no network). ``@ag-ui/client`` (the same flow as the
LangGraph upstream's, ``upstream_client_flows.mjs``) runs it through the
consumer service to its two interrupts; a partial resume is refused by the
gatekeeper (422, nothing dispatched); the full resume is admitted and ADK
runs the confirmed tool and finishes. Every run the client read is checked
by ``ag-ui-validate``, and a fresh run live through ``validate_endpoint``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from relay_system import RelaySystem
from upstream_system import (
    assert_live_run_conformant,
    assert_runs_conformant,
    client_flow,
    upstream_system,
)

pytestmark = pytest.mark.interop

AGENT = "refunds"
"""The name the Node flow uses by default."""
TARGET = "tests.integration.producer.adk_agents:agent"
UNSTARTED_TOOL_RESULT = "AGUI207"
"""ag-ui-validate's rule for a TOOL_CALL_RESULT whose call is not open: ag-ui-adk 0.11
answers a confirmed tool's call twice, ADK's placeholder ("requires confirmation") in the
interrupted run and the real result in the resumed one. The upstream's finding."""


@pytest.fixture(scope="module")
async def adk_relay(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
                    ) -> AsyncIterator[RelaySystem]:
    async with upstream_system(kafka_bootstrap, tmp_path_factory.mktemp("adk-relay"),
                               {AGENT: TARGET}) as system:
        yield system


@pytest.fixture(scope="module")
async def flow_report(adk_relay: RelaySystem, node_client: Path) -> dict[str, Any]:
    return await client_flow(adk_relay, node_client)


def test_adk_interrupts_a_partial_resume_is_refused_and_a_full_one_finishes(
        flow_report: dict[str, Any]) -> None:
    flow = flow_report["flow"]
    assert flow["ok"]
    assert flow["outcomes"] == ["interrupt", "success"]
    first, second = flow["interrupts"]
    assert [i["reason"] for i in (first, second)] == ["confirmation", "confirmation"]
    tools = [i["metadata"]["adk"]["originalFunctionCall"]["name"] for i in (first, second)]
    assert tools == ["approve_amount", "confirm_customer"]
    assert flow["partialStatus"] == 422
    assert flow["problem"]["code"] == "uncovered_interrupts"
    assert flow["problem"]["interruptIds"] == [second["id"]]
    # The flow answers "yes" then "no"; ADK ran the last-answered tool with its answer
    # (ag-ui-adk 0.11 loses the first answer of one resume: see the README).
    assert "confirm_customer=7:no" in flow["said"]
    assert [r["status"] for r in flow_report["requests"]] == [200, 200]
    assert flow_report["warnings"] == []
    assert flow_report["errors"] == []


def test_every_run_the_client_read_is_conformant(flow_report: dict[str, Any]) -> None:
    assert len(assert_runs_conformant(flow_report["events"], waived=(UNSTARTED_TOOL_RESULT,))) == 2


async def test_a_fresh_adk_run_passes_the_live_transport_check(adk_relay: RelaySystem) -> None:
    await assert_live_run_conformant(adk_relay, AGENT, "io-adk-live", "Hello.")
