"""The health side door answers probes and scrapes as the orchestrator expects."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from deploy.kafka.probe import free_port as _free_port
from services.runtime.health import serving_health

pytestmark = pytest.mark.unit


async def _get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=2.0) as client:
        for _ in range(50):
            try:
                return await client.get(url)
            except httpx.ConnectError:
                await asyncio.sleep(0.05)
        return await client.get(url)


async def test_readyz_follows_the_check_and_metrics_are_prometheus_text() -> None:
    port = _free_port()
    ready = {"ok": False}
    async with serving_health("127.0.0.1", port, lambda: ready["ok"]):
        base = f"http://127.0.0.1:{port}"
        assert (await _get(f"{base}/healthz")).json() == {"status": "ok"}
        assert (await _get(f"{base}/readyz")).status_code == 503
        ready["ok"] = True
        assert (await _get(f"{base}/readyz")).status_code == 200
        metrics = await _get(f"{base}/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        assert "# TYPE" in metrics.text
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(timeout=1.0) as client:
            await client.get(f"http://127.0.0.1:{port}/healthz")


async def test_no_port_serves_nothing() -> None:
    async with serving_health("127.0.0.1", 0, lambda: True):
        pass


async def test_a_failing_readyz_names_the_checks_that_fail() -> None:
    port = _free_port()
    failing = {"partition-3": "input waiting, committed offsets unchanged for 31 s"}
    async with serving_health("127.0.0.1", port, lambda: not failing, lambda: failing):
        response = await _get(f"http://127.0.0.1:{port}/readyz")
        assert response.status_code == 503
        assert response.json() == {"ready": False, "checks": failing}
        failing.clear()
        response = await _get(f"http://127.0.0.1:{port}/readyz")
        assert (response.status_code, response.json()) == (200, {"ready": True})
