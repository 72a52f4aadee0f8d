"""One notification's attempts against a receiver on loopback (no broker needed)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from notifier_support import SECRET, free_port
from receiver import ENDLESS, HANG, TRICKLE, Receiver

from contracts.webhooks import WebhookEvent
from services.notifier.delivery import CONNECTIONS, Webhook
from services.notifier.settings import NotifierSettings

pytestmark = pytest.mark.integration

EVENT = WebhookEvent(kind="interrupted", delivery_id="d-1", thread_id="t1", run_id="r1",
                     interrupt_ids=["a"], at=datetime(2026, 12, 2, tzinfo=UTC))


def _webhook(url: str, **options: object) -> Webhook:
    base: dict[str, object] = {"url": url, "secret": SECRET, "retries": 3, "backoff_s": 0.01,
                               "timeout_s": 0.3}
    return Webhook(NotifierSettings.model_validate({**base, **options}))


async def test_failures_are_retried_until_a_2xx() -> None:
    async with Receiver(SECRET.encode(), lambda _i, n, _e: {1: 500, 2: HANG, 3: 302}.get(n, 200),
                        hang_s=2) as hook:
        webhook = _webhook(hook.url)
        outcome = await webhook.deliver(EVENT, asyncio.Event())
        await webhook.aclose()
    assert outcome is not None
    assert (outcome.delivered, outcome.attempts, outcome.last) == (True, 4, "HTTP 200")
    assert [a.answer for a in hook.attempts] == [500, HANG, 302, 200], "a redirect is a failure"


async def test_after_the_last_retry_the_outcome_names_the_last_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/hook?token=do-not-log"  # nobody listens
    webhook = _webhook(url, retries=1)
    outcome = await webhook.deliver(EVENT, asyncio.Event())
    await webhook.aclose()
    assert outcome is not None
    assert (outcome.delivered, outcome.attempts) == (False, 2)
    assert outcome.last.startswith("ConnectError")
    assert "do-not-log" not in outcome.last


async def test_a_stop_during_the_backoff_leaves_the_notification_undelivered() -> None:
    async with Receiver(SECRET.encode(), lambda _i, _n, _e: 503) as hook:
        webhook = _webhook(hook.url, retries=5, backoff_s=30)
        stop = asyncio.Event()
        task = asyncio.create_task(webhook.deliver(EVENT, stop))
        await hook.wait_for(lambda: len(hook.attempts) == 1)
        stop.set()
        outcome = await asyncio.wait_for(task, 5)
        await webhook.aclose()
    assert outcome is None, "not dead-lettered: the next owner delivers it again"
    assert len(hook.attempts) == 1


async def test_an_attempt_ends_at_its_timeout_however_slowly_its_answer_trickles() -> None:
    """httpx's own timeout bounds each read, not the attempt: a receiver sending its
    answer's head a byte every 50 ms would hold the notifier for ever."""
    async with Receiver(SECRET.encode(), lambda _i, n, _e: TRICKLE if n == 1 else 204) as hook:
        webhook = _webhook(hook.url, retries=1)
        async with asyncio.timeout(30):  # a hang fails the test instead of stalling it
            outcome = await webhook.deliver(EVENT, asyncio.Event())
        await webhook.aclose()
    assert outcome is not None
    assert (outcome.delivered, outcome.attempts, outcome.last) == (True, 2, "HTTP 204")
    assert [a.answer for a in hook.attempts] == [TRICKLE, 204]


async def test_only_the_status_of_an_answer_is_read_never_its_body() -> None:
    """A receiver answering 200 with a body that never ends: delivered on its status."""
    async with Receiver(SECRET.encode(), lambda _i, _n, _e: ENDLESS) as hook:
        webhook = _webhook(hook.url, retries=0, timeout_s=5)
        async with asyncio.timeout(30):
            outcome = await webhook.deliver(EVENT, asyncio.Event())
        await webhook.aclose()
        streamed = hook.streamed
    assert outcome is not None
    assert (outcome.delivered, outcome.attempts, outcome.last) == (True, 1, "HTTP 200")
    assert streamed < 64 * 65536, "the body was read on"


async def test_an_attempt_waiting_for_a_free_connection_is_not_failed_by_the_wait() -> None:
    """Every connection held by other partitions' hanging receivers: the attempt waits for
    one, and its timeout starts then (the receiver takes 0.4 s of the 1 s to answer)."""
    hanging = [EVENT.model_copy(update={"delivery_id": f"d-hang-{n}", "thread_id": f"t-hang-{n}"})
               for n in range(CONNECTIONS)]

    def script(_id: str, _n: int, event: WebhookEvent) -> int:
        return HANG if event.thread_id.startswith("t-hang-") else 204

    async with Receiver(SECRET.encode(), script, hang_s=5, delay_s=0.4) as hook:
        webhook = _webhook(hook.url, retries=0, timeout_s=1.0)
        stop = asyncio.Event()
        held = [asyncio.create_task(webhook.deliver(e, stop)) for e in hanging]
        await hook.wait_for(lambda: len(hook.attempts) == CONNECTIONS)
        outcome = await webhook.deliver(EVENT, stop)
        others = await asyncio.gather(*held)
        await webhook.aclose()
    assert outcome is not None
    assert (outcome.delivered, outcome.attempts, outcome.last) == (True, 1, "HTTP 204")
    assert all(o is not None and not o.delivered for o in others)
