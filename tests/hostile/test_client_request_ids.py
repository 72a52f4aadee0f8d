"""Request ids a client chooses (``agui-request-id`` with ``agui-forwarded-by``).

The consumer service publishes a forwarded-looking POST under the request id its headers
name (``services.consumer.forward.arrived_as``), and any client can send those headers.
Such an id must make the client's own request idempotent and nothing more:

- it cannot take the expiry policy's request id (``expiry:<interruptedRunId>``, derived
  and predictable): the relay's own namespace is refused ``400 invalid_header``, and the
  thread is cancelled at its deadline as any other;

One ``agui-relay up`` of its own (the expiry policy on, a short decision timeout), on
the session broker; one consumer instance, so it owns every partition and serves a
forwarded-looking request itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from faults.load import run_input

from hostile.client import Tenant, finished, fresh
from hostile.stack import TENANTS, UpStack
from services.consumer.forward import FORWARDED_BY, REQUEST_ID
from services.gatekeeper.expiry_policy import request_id_for

pytestmark = pytest.mark.hostile

DECISION_TIMEOUT_S = 4


class ExpiringStack(UpStack):
    """``agui-relay up`` with ``AGUI_ON_EXPIRY=cancel`` and a short decision timeout."""

    def env(self) -> dict[str, str]:
        return {**super().env(), "AGUI_ON_EXPIRY": "cancel",
                "AGUI_DECISION_TIMEOUT_S": str(DECISION_TIMEOUT_S)}


@pytest.fixture(scope="module")
def expiring(kafka_bootstrap: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExpiringStack]:
    with ExpiringStack(kafka_bootstrap, tmp_path_factory.mktemp("request-ids")).running() as stack:
        yield stack


@pytest.fixture
async def tenant(expiring: ExpiringStack) -> AsyncIterator[Tenant]:
    async with Tenant(expiring.url, TENANTS["tenant-a"]) as client:
        yield client


def as_forwarded(request_id: str) -> dict[str, str]:
    return {FORWARDED_BY: "http://127.0.0.1:1", REQUEST_ID: request_id}


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def status_of(tenant: Tenant, thread: str) -> dict[str, Any]:
    answer = await tenant.get(f"/threads/{thread}", timeout=10.0)
    assert answer.status_code == 200, answer.text[:300]
    doc = answer.json()
    assert isinstance(doc, dict)
    return doc


async def test_a_client_request_id_cannot_take_the_expiry_policys_request_id(
        tenant: Tenant) -> None:
    """Beside a control thread, a junk request sent under ``expiry:<run>`` before the
    deadline: it is refused as an id in the relay's namespace, and both threads are
    cancelled by the policy (it had left the squatted one interrupted for good)."""
    lapse = iso(datetime.now(UTC) + timedelta(seconds=5))
    threads = {}
    for tag in ("squat", "control"):
        thread, run = fresh(tag)
        first = await tenant.run("scripted", run_input(thread, run, script={
            "interrupts": [{"id": "i1", "reason": "input_required", "expiresAt": lapse}]}))
        finished(first, "interrupt")
        threads[tag] = (thread, run)
    thread, run = threads["squat"]
    junk = await tenant.run("scripted", run_input(thread, f"{run}-junk", resume=[]),
                            headers=as_forwarded(request_id_for(run)))
    assert junk.status in (400, 422), junk  # refused, whatever else happens

    deadline = time.monotonic() + 30
    states: dict[str, dict[str, Any]] = {}
    control_idle_at: float | None = None
    while time.monotonic() < deadline:  # both idle, or 3 s after the control thread was
        states = {tag: await status_of(tenant, t) for tag, (t, _) in threads.items()}
        if states["control"]["status"] == "idle" and control_idle_at is None:
            control_idle_at = time.monotonic()
        if all(s["status"] == "idle" for s in states.values()) or (
                control_idle_at is not None and time.monotonic() - control_idle_at > 3):
            break
        await asyncio.sleep(0.5)
    assert states["control"]["status"] == "idle", states["control"]  # the policy works
    assert states["squat"]["status"] == "idle", (
        "the expiry policy's resume was answered with the junk request's remembered "
        f"rejection (same request id); the thread stays interrupted: {states['squat']}")
    assert (junk.status, (junk.problem or {}).get("code")) == (400, "invalid_header"), junk
