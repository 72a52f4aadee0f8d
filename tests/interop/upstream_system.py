"""The relay as processes with one existing agent: ``AGUI_AGENTS=refunds=<url>``.

The same gatekeeper, producer worker and consumer service as
``relay_system``, on a fresh topic prefix, except that the worker hosts no
sample: its one agent is the upstream AG-UI endpoint the test serves, or a
framework's agent object (``module:object``). Also the checks every such
test makes: the reference client's flow (``upstream_client_flows.mjs``)
run to its end, every run it read ``ag-ui-validate`` clean, and a fresh
run passing the live transport check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
from ag_ui_validate.pytest_plugin import validate_agui
from ag_ui_validate.transport import TransportOptions, validate_endpoint
from ag_ui_validate.types import ValidatorOptions
from relay_system import READY_S, Child, RelaySystem, service_env
from test_interop_client import run_node

from contracts import EVENT_DECODER
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings


@contextlib.asynccontextmanager
async def upstream_system(bootstrap: str, log_dir: Path,
                          agents: dict[str, str]) -> AsyncIterator[RelaySystem]:
    """The three services with ``agents`` (name → URL or module:object) as the only agents."""
    kafka = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=bootstrap,
                          AGUI_TOPIC_PREFIX=f"up{uuid.uuid4().hex[:10]}", AGUI_PARTITIONS=2)
    await ensure_topics(kafka, tuple(agents))
    port = launcher.free_port()
    env = service_env(kafka, AGUI_HTTP_PORT=str(port))
    env["AGUI_AGENTS"] = ",".join(f"{name}={url}" for name, url in agents.items())
    system = RelaySystem(kafka, f"http://127.0.0.1:{port}", [
        Child(module, log_dir / f"{module.rsplit('.', 1)[-1]}.log", env)
        for module in ("services.gatekeeper", "services.producer", "services.consumer")])
    try:
        for child in system.children:
            await child.start()
        await ready(system, len(agents))
        yield system
    finally:
        for child in system.children:
            await child.stop()


async def ready(system: RelaySystem, agents: int) -> None:
    """/readyz answers 200, the gatekeeper and the worker own their partitions."""
    gatekeeper, producer, _ = system.children
    async with httpx.AsyncClient(base_url=system.url, timeout=3.0) as http:
        async with asyncio.timeout(READY_S):
            while True:
                for child in system.children:
                    child.check_alive()
                with contextlib.suppress(httpx.HTTPError):
                    if ((await http.get("/readyz")).status_code == 200
                            and "assigned partitions" in gatekeeper.log()
                            and producer.log().count("own partitions") >= agents):
                        return
                await asyncio.sleep(0.2)


async def client_flow(system: RelaySystem, node_client: Path) -> dict[str, Any]:
    """``upstream_client_flows.mjs`` against ``system``: its report, the flow finished."""
    code, report, stderr = await run_node(node_client / "upstream_client_flows.mjs", system.url)
    assert code == 0, f"{json.dumps(report.get('flow'))}\n{stderr}\n{system.logs()}"
    return report


def assert_runs_conformant(events: list[dict[str, Any]], *, waived: tuple[str, ...] = ()
                           ) -> list[list[dict[str, Any]]]:
    """Split what the client read into runs, each 1.0 and ag-ui-validate clean (bar
    ``waived`` rules: an upstream's known finding); returns the runs."""
    runs: list[list[dict[str, Any]]] = []
    for event in events:
        EVENT_DECODER.validate_python(event)
        if event["type"] == "RUN_STARTED":
            runs.append([])
        runs[-1].append(event)
    for run in runs:
        assert run[0].get("protocolVersion") == "1.0", run[0]
        assert [e["type"] for e in run].count("RUN_STARTED") == 1, run
        report = validate_agui([orjson.dumps(e).decode() for e in run],
                               severity_overrides=dict.fromkeys(waived, "off") or None)
        findings = [(d.rule, d.message) for d in report.diagnostics if d.severity != "info"]
        assert not findings, findings
    return runs


async def assert_live_run_conformant(system: RelaySystem, agent: str, thread_id: str,
                                     content: str) -> None:
    """A fresh run of ``agent`` passes ``validate_endpoint`` with no error or warning."""
    run_input = {"threadId": thread_id, "runId": f"{thread_id}-1", "protocolVersion": "1.0",
                 "state": {}, "tools": [], "context": [], "forwardedProps": {},
                 "messages": [{"id": "u1", "role": "user", "content": content}]}
    result = await validate_endpoint(f"{system.url}/agents/{agent}", TransportOptions(
        input=run_input, timeout_ms=60_000, keepalive_window_ms=30_000,
        validator=ValidatorOptions()))
    findings = [f"{d.rule} {d.severity}: {d.message}" for d in result.report.diagnostics
                if d.severity in ("error", "warning")]
    assert result.status == 200, system.logs()
    assert result.transport_error is None, result.transport_error
    assert not findings, findings
