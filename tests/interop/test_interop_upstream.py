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

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from ag_ui_validate.pytest_plugin import validate_agui
from ag_ui_validate.transport import TransportOptions, validate_endpoint
from ag_ui_validate.types import ValidatorOptions
from relay_system import RelaySystem
from test_interop_client import run_node
from upstream_langgraph import serving
from upstream_system import upstream_system

from contracts import EVENT_DECODER

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
    code, report, stderr = await run_node(node_client / "upstream_client_flows.mjs",
                                          upstream_relay.url)
    assert code == 0, f"{json.dumps(report.get('flow'))}\n{stderr}\n{upstream_relay.logs()}"
    return report


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
    runs: list[list[dict[str, Any]]] = []
    for event in flow_report["events"]:
        EVENT_DECODER.validate_python(event)
        if event["type"] == "RUN_STARTED":
            runs.append([])
        runs[-1].append(event)
    assert [run[0].get("protocolVersion") for run in runs] == ["1.0", "1.0"]
    for run in runs:
        assert [e["type"] for e in run].count("RUN_STARTED") == 1
        report = validate_agui([orjson.dumps(e).decode() for e in run])
        findings = [(d.rule, d.message) for d in report.diagnostics if d.severity != "info"]
        assert findings == []


async def test_a_fresh_upstream_run_passes_the_live_transport_check(
        upstream_relay: RelaySystem) -> None:
    run_input = {"threadId": "io-up-live", "runId": "io-up-live-1", "protocolVersion": "1.0",
                 "state": {}, "tools": [], "context": [], "forwardedProps": {},
                 "messages": [{"id": "u1", "role": "user", "content": "Refund order 7."}]}
    result = await validate_endpoint(f"{upstream_relay.url}/agents/{AGENT}", TransportOptions(
        input=run_input, timeout_ms=60_000, keepalive_window_ms=30_000,
        validator=ValidatorOptions()))
    findings = [f"{d.rule} {d.severity}: {d.message}" for d in result.report.diagnostics
                if d.severity in ("error", "warning")]
    assert result.status == 200, upstream_relay.logs()
    assert result.transport_error is None
    assert findings == []
