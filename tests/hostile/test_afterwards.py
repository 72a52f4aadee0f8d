"""After every hostile request: the stack is whole, and ``up`` still stops on a signal.

Runs after every other hostile test (``conftest`` moves this module last).
No single request may wedge, crash or freeze any service, so once they
all have been sent: every service's ``/readyz`` is 200 and still the
process ``up`` started, a normal approval interrupt and resume (the
README's tour) works on a thread of every partition — a partition wedged
by a poison record would time out here — and no service logged a
traceback. Last, ``up`` stops on SIGINT within its grace period (finding 3:
it ignored SIGINT and SIGTERM once a child's pipe had stalled).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from hostile.client import Tenant, approval_flow
from hostile.stack import UpStack
from hostile.topics import thread_on
from services.cli.up import GRACE_S

pytestmark = pytest.mark.hostile


async def test_every_service_is_ready_and_serves_every_partition(relay: UpStack,
                                                                 tenant_a: Tenant) -> None:
    relay.check_alive()
    async with httpx.AsyncClient(timeout=5.0) as probe:
        for name, url in relay.readyz_urls().items():
            ready = await probe.get(url)
            assert ready.status_code == 200, f"{name}: {ready.text[:300]}"
    partitions = relay.settings.partitions
    await asyncio.gather(*(approval_flow(tenant_a, thread_on(p, partitions, f"every-{p}"))
                           for p in range(partitions)))


def test_no_service_logged_a_traceback(relay: UpStack) -> None:
    for name, path in relay.log_files().items():
        text = path.read_text("utf-8", "replace")
        at = text.find("Traceback")
        assert at < 0, f"{name} logged a traceback:\n{text[max(at - 500, 0):at + 3000]}"


def test_up_stops_on_sigint_within_its_grace(relay: UpStack) -> None:
    relay.stop(GRACE_S)  # AssertionError when up outlives its grace (and a margin)
    assert relay.process is not None
    assert relay.process.returncode == 0, relay.output()[-3000:]
