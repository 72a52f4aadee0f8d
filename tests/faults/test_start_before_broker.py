"""Services started while the broker is away wait for it, not ready, and start once it answers.

An instance replaced during an outage, or a relay started before its broker:
every service exited within seconds with aiokafka's "Unable to bootstrap"
traceback (the consumer service from its lifespan, exit status 3; the
gatekeeper, a worker and the notifier from their first client, status 1), and
under ``agui-relay up`` one exiting stops them all (found by probing). Now each
says it waits for the broker, answers ``/readyz`` 503 meanwhile, and serves once
a broker answers at ``KAFKA_BOOTSTRAP_SERVERS``. When the broker goes away again,
every ``/readyz`` says so: the gatekeeper's, a worker's and the notifier's stayed
200 through a whole outage (they asked only whether the group was joined once).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import orjson
import pytest

from deploy.kafka import launcher
from faults.harness import AGENT_SPECS, MODULES, _clean_environ, unique_prefix
from faults.load import run_input
from faults.procs import ServiceProcess

pytestmark = pytest.mark.faults

AWAY_S = 10.0
"""How long the services run with no broker (each exited within 3 to 9 s)."""


def service(role: str, module: str, bootstrap: str, prefix: str, tmp: Path) -> ServiceProcess:
    port = launcher.free_port()
    env = {**_clean_environ(), "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "AGUI_TOPIC_PREFIX": prefix,
           "AGUI_PARTITIONS": "2", "AGUI_AGENTS": AGENT_SPECS, "AGUI_LOG_FORMAT": "text",
           "PYTHONUNBUFFERED": "1"}
    if role == "consumer":
        env |= {"AGUI_HTTP_HOST": "127.0.0.1", "AGUI_HTTP_PORT": str(port)}
    else:
        env |= {"AGUI_HEALTH_PORT": str(port)}
    if role == "notifier":
        env |= {"AGUI_WEBHOOK_URL": f"http://127.0.0.1:{launcher.free_port()}/hook",
                "AGUI_WEBHOOK_SECRET": "start-before-broker"}
    return ServiceProcess(role, module, env, tmp, f"http://127.0.0.1:{port}")


async def readiness(http: httpx.AsyncClient, procs: list[ServiceProcess]) -> dict[str, object]:
    codes: dict[str, object] = {}
    for p in procs:
        try:
            codes[p.name] = (await http.get(f"{p.health_url}/readyz")).status_code
        except httpx.HTTPError as exc:
            codes[p.name] = type(exc).__name__
    return codes


async def test_services_started_before_their_broker_wait_for_it_then_serve(
        tmp_path: Path) -> None:
    launcher.fetch(quiet=True)
    port, controller = launcher.free_port(), launcher.free_port()
    bootstrap = f"127.0.0.1:{port}"
    modules = {**MODULES, "notifier": "services.notifier"}
    prefix = unique_prefix("sb")
    procs = [service(role, module, bootstrap, prefix, tmp_path)
             for role, module in modules.items()]
    broker = None
    try:
        for p in procs:
            p.start()
        began = time.monotonic()
        while time.monotonic() - began < AWAY_S:
            exited = {p.name: p.log_tail(300) for p in procs if not p.alive()}
            assert not exited, f"exited while the broker was away: {exited}"
            await asyncio.sleep(0.2)
        async with httpx.AsyncClient(timeout=5.0) as http:
            assert set((await readiness(http, procs)).values()) == {503}
            for p in procs:
                assert "waiting for the broker at" in p.log_tail(4000), p.log_tail(600)
            broker = await asyncio.to_thread(launcher.start, tmp_path / "broker", port,
                                             controller, quiet=True)
            deadline = time.monotonic() + 120
            while (codes := await readiness(http, procs)) and set(codes.values()) != {200}:
                assert all(p.alive() for p in procs), {p.name: p.log_tail(300) for p in procs}
                assert time.monotonic() < deadline, codes
                await asyncio.sleep(0.5)
            consumer = next(p for p in procs if p.name == "consumer")
            body = orjson.dumps(run_input("sb-thread", "sb-run", script={"text": "served"}))
            ran = await http.post(f"{consumer.health_url}/agents/scripted", content=body,
                                  timeout=60.0, headers={"content-type": "application/json",
                                                         "accept": "text/event-stream"})
            assert ran.status_code == 200, ran.text
            assert '"RUN_FINISHED"' in ran.text
            await asyncio.to_thread(broker.stop)  # and away again: not ready, and why
            broker = None
            deadline = time.monotonic() + 30
            while set((codes := await readiness(http, procs)).values()) != {503}:
                assert time.monotonic() < deadline, codes
                await asyncio.sleep(0.5)
            for p in procs:
                checks = (await http.get(f"{p.health_url}/readyz")).json().get("checks", {})
                assert ("broker" in checks) or (p.name == "consumer"), (p.name, checks)
            assert all(p.alive() for p in procs)
    finally:
        for p in procs:
            await asyncio.to_thread(p.stop, 10.0)
        if broker is not None:
            await asyncio.to_thread(broker.stop)
