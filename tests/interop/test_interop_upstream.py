"""An existing AG-UI service behind the relay by one line: a LangGraph graph over HTTP.

The upstream is ``ag-ui-langgraph``'s own FastAPI endpoint serving a graph of
plain functions (``upstream_langgraph``: two parallel ``interrupt()`` nodes,
the 1.0 interrupt outcome on, no LLM). The relay's worker hosts it as
``AGUI_AGENTS=refunds=http://...`` (``upstream_system``). The reference
client ``@ag-ui/client`` (``upstream_client_flows.mjs``) runs it to its two
interrupts; a partial resume is refused by the gatekeeper (422, nothing
dispatched); the full resume is admitted and the graph resumes and
finishes. Every stream is checked by ``ag-ui-validate``: the client's, per
run, and a fresh run live through ``validate_endpoint``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from relay_system import RelaySystem
from upstream_langgraph import serving
from upstream_system import (
    assert_live_run_conformant,
    assert_runs_conformant,
    client_flow,
    upstream_system,
)

pytestmark = pytest.mark.interop

AGENT = "refunds"
"""The name the Node flow uses by default."""


@pytest.fixture(scope="module")
async def upstream_relay(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
                         ) -> AsyncIterator[RelaySystem]:
    async with serving() as url, upstream_system(
            kafka_bootstrap, tmp_path_factory.mktemp("upstream-relay"), {AGENT: url}) as system:
        yield system


@pytest.fixture(scope="module")
async def flow_report(upstream_relay: RelaySystem, node_client: Path) -> dict[str, Any]:
    return await client_flow(upstream_relay, node_client)


def test_the_upstream_interrupts_a_partial_resume_is_refused_and_a_full_one_finishes(
        flow_report: dict[str, Any]) -> None:
    flow = flow_report["flow"]
    assert flow["ok"]
    assert flow["outcomes"] == ["interrupt", "success"]
    first, second = flow["interrupts"]
    assert {first["reason"], second["reason"]} == {"approve_amount", "confirm_customer"}
    assert flow["partialStatus"] == 422
    assert flow["problem"]["code"] == "uncovered_interrupts"
    assert flow["problem"]["interruptIds"] == [second["id"]]
    answered = {first["reason"]: "yes", second["reason"]: "no"}
    assert (f"settled: amount={answered['approve_amount']}, "
            f"customer={answered['confirm_customer']}") in flow["said"]
    assert [r["status"] for r in flow_report["requests"]] == [200, 200]
    assert flow_report["warnings"] == []
    assert flow_report["errors"] == []


def test_every_run_the_client_read_is_conformant(flow_report: dict[str, Any]) -> None:
    assert len(assert_runs_conformant(flow_report["events"])) == 2


async def test_a_fresh_upstream_run_passes_the_live_transport_check(
        upstream_relay: RelaySystem) -> None:
    await assert_live_run_conformant(upstream_relay, AGENT, "io-up-live", "Refund order 7.")
