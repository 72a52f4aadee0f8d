"""Request ids a client chooses (``agui-request-id`` with ``agui-forwarded-by``).

The consumer service publishes a forwarded-looking POST under the request id its headers
name (``services.consumer.forward.arrived_as``), and any client can send those headers.
Such an id must make the client's own request idempotent and nothing more:

- it cannot take the expiry policy's request id (``expiry:<interruptedRunId>``, derived
  and predictable): the relay's own namespace is refused ``400 invalid_header``, and the
  thread is cancelled at its deadline as any other;
- one id on two threads at once is two requests, each answered with its own run (the
  decision waiters are per thread);
- a request sent again under its id after its run ended is answered with that run from
  the log, not left waiting on keep-alives for a run that is over.

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

from hostile.client import Tenant, as_forwarded, finished, fresh
from hostile.stack import TENANTS, UpStack
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


async def test_one_request_id_on_two_threads_never_runs_a_run_its_client_was_refused(
        tenant: Tenant) -> None:
    """Two POSTs at once under one request id, each on a thread of its own. Each run
    the gatekeeper admits is dispatched and runs; its client must be told so (its
    stream), not ``504`` or a ``400`` about the other thread."""
    request_id = f"q-two-threads-{time.time_ns()}"
    (one, run_one), (two, run_two) = fresh("twin-a"), fresh("twin-b")
    answers = await asyncio.gather(
        tenant.run("scripted", run_input(one, run_one, script={"text": "a"}),
                   headers=as_forwarded(request_id), timeout_s=20),
        tenant.run("scripted", run_input(two, run_two, script={"text": "b"}),
                   headers=as_forwarded(request_id), timeout_s=20))
    await asyncio.sleep(2)
    ran = {thread: (await status_of(tenant, thread)).get("lastRunId") == run
           for thread, run in ((one, run_one), (two, run_two))}
    told = {thread: (answer.status, (answer.problem or {}).get("code"))
            for thread, answer in zip((one, two), answers, strict=True)}
    refused_but_ran = [t for t in (one, two) if ran[t] and told[t][0] != 200]
    assert not refused_but_ran, (
        f"dispatched under one request id: {ran}; the clients were told {told}")


async def test_a_request_sent_again_under_its_id_is_answered_not_left_waiting(
        tenant: Tenant) -> None:
    """The same body under the same request id, after its run ended: the gatekeeper
    replays the admission, and the consumer answers with the run from the log, whole and
    once, rather than keep the stream open for a run that already ended."""
    thread, run = fresh("again")
    wire = run_input(thread, run, script={"text": "once"})
    request_id = f"q-again-{time.time_ns()}"
    first = await tenant.run("scripted", wire, headers=as_forwarded(request_id))
    finished(first, "success")
    started = time.monotonic()
    again = await tenant.run("scripted", wire, headers=as_forwarded(request_id),
                             timeout_s=25)
    took = time.monotonic() - started
    assert again.error is None, (
        f"no answer within {took:.0f} s: the replayed admission's stream waits for run "
        f"{run!r}, which ended before it was asked again (keep-alives only)")
    finished(again, "success")  # the run, from the log, whole and once
    assert [e["type"] for e in again.events] == [e["type"] for e in first.events]
