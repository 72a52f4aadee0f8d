"""The notifier on the real broker: signed, retried, once per delivery id, in order per thread."""

from __future__ import annotations

import asyncio

import pytest
from notifier_support import SECRET, Threads, dead_letters, running, soon
from receiver import HANG, Receiver

from contracts.webhooks import WebhookEvent
from services.runtime.metrics import sample_value
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

Step = tuple[str, str, list[str]]


def _steps(events: list[WebhookEvent]) -> list[Step]:
    return [(e.kind, e.run_id, e.interrupt_ids) for e in events]


def _counts(name: str) -> dict[str, float]:
    return {k: sample_value(name, {"kind": k}) or 0.0
            for k in ("interrupted", "answered", "expired")}


def _failing_first(delivery_id: str, attempt: int, event: WebhookEvent) -> int:
    """Every notification: a 500, then no answer (a timeout), then accepted."""
    return {1: 500, 2: HANG}.get(attempt, 204)


async def test_every_notification_arrives_signed_once_per_id_in_order(
        kafka: KafkaSettings, threads: Threads) -> None:
    delivered, retried = _counts("agui_webhook_delivered_total"), \
        _counts("agui_webhook_retried_total")
    async with Receiver(SECRET.encode(), _failing_first) as hook, running(kafka, hook.url):
        expires = soon(4)
        await threads.interrupted("t1", "r1", "a", "b")
        await threads.interrupted("t2", "r1", "x", expires_at=expires)
        await threads.interrupted("t3", "r1", "y", expires_at=soon(600))
        await threads.resumed("t1", "r2", "a", "b")
        await threads.resumed("t3", "r2", "y")
        await threads.interrupted("t1", "r2", "c")
        await threads.resumed("t1", "r3", "c")
        for n in range(4, 8):
            await threads.interrupted(f"t{n}", "r1", "q")
            await threads.resumed(f"t{n}", "r2", "q")
        expected: dict[str, list[Step]] = {
            "t1": [("interrupted", "r1", ["a", "b"]), ("answered", "r1", ["a", "b"]),
                   ("interrupted", "r2", ["c"]), ("answered", "r2", ["c"])],
            "t2": [("interrupted", "r1", ["x"]), ("expired", "r1", ["x"])],
            "t3": [("interrupted", "r1", ["y"]), ("answered", "r1", ["y"])],
            **{f"t{n}": [("interrupted", "r1", ["q"]), ("answered", "r1", ["q"])]
               for n in range(4, 8)},
        }
        total = sum(len(v) for v in expected.values())
        await hook.wait_for(lambda: len(hook.accepted) >= total, within_s=120)

    assert {t: _steps(e) for t, e in hook.by_thread().items()} == expected
    assert len(hook.accepted) == total
    assert all(a.signed for a in hook.attempts), "every attempt carries a valid signature"
    bodies: dict[str, set[bytes]] = {}
    for a in hook.attempts:
        bodies.setdefault(a.delivery_id, set()).add(a.body)
        assert a.headers["content-type"] == "application/json"
        assert a.delivery_id == a.event.delivery_id
    assert all(len(b) == 1 for b in bodies.values()), "a retry resends the same bytes"
    assert all(hook.tries[a.delivery_id] >= 3 for a in hook.accepted), "500, timeout, then 204"
    by_thread = hook.by_thread()
    assert by_thread["t2"][1].at.isoformat(timespec="milliseconds") == \
        expires.isoformat(timespec="milliseconds")
    answered = by_thread["t1"][1]
    assert answered.decision is not None
    assert (answered.decision.request_id, answered.decision.run_id) == ("req-r2", "r2")
    assert (answered.principal, answered.answered_by) == ("acme", "acme#alice")
    assert b'"answeredBy":"acme#alice"' in next(
        a.body for a in hook.accepted if a.delivery_id == answered.delivery_id)
    raised = by_thread["t1"][0]
    assert [i.message for i in raised.interrupts or []] == ["approve a?", "approve b?"]
    after = _counts("agui_webhook_delivered_total")
    assert after["answered"] - delivered["answered"] >= 7
    assert after["expired"] - delivered["expired"] >= 1
    assert _counts("agui_webhook_retried_total")["interrupted"] - retried["interrupted"] >= 16


async def test_a_receiver_that_never_succeeds_ends_in_dead_letters_with_the_reason(
        kafka: KafkaSettings, threads: Threads) -> None:
    healthy = {"on": False}

    def script(_id: str, _n: int, event: WebhookEvent) -> int:
        if healthy["on"]:
            return 204
        return 500 if event.thread_id.startswith("t-500") else HANG

    before = sample_value("agui_webhook_dead_lettered_total", {"kind": "interrupted"}) or 0.0
    async with Receiver(SECRET.encode(), script, hang_s=5) as hook, \
            running(kafka, hook.url, retries=1, timeout_s=0.3):
        await threads.interrupted("t-500", "r1", "a")
        await threads.resumed("t-500", "r2", "a")
        await threads.interrupted("t-hang", "r1", "b")
        letters = await dead_letters(kafka, 3)
        healthy["on"] = True
        await threads.interrupted("t-late", "r1", "c")
        await hook.wait_for(lambda: len(hook.accepted) == 1)

    assert [a.event.thread_id for a in hook.accepted] == ["t-late"], "the partition goes on"
    by_thread: dict[str, list[WebhookEvent]] = {}
    for letter in letters:
        assert (letter.service, letter.code) == ("notifier", "webhook_failed")
        assert letter.source_topic == kafka.topics.threads
        event = WebhookEvent.model_validate_json(letter.value)
        assert letter.key == event.thread_id
        assert letter.headers == {"X-Agui-Delivery": event.delivery_id}
        assert "after 2 attempts" in letter.reason
        assert SECRET not in letter.reason + letter.value
        assert "do-not-log" not in letter.reason, "the URL (and its token) stays out"
        by_thread.setdefault(event.thread_id, []).append(event)
        if event.thread_id == "t-500":
            assert letter.reason.endswith("last: HTTP 500")
        else:
            assert letter.reason.endswith("last: timeout after 0.3 s")
    assert [e.kind for e in by_thread["t-500"]] == ["interrupted", "answered"], "in order"
    assert [e.kind for e in by_thread["t-hang"]] == ["interrupted"]
    assert {hook.tries[e.delivery_id] for es in by_thread.values() for e in es} == {2}
    after = sample_value("agui_webhook_dead_lettered_total", {"kind": "interrupted"}) or 0.0
    assert after - before == 2


async def test_a_restarted_notifier_restores_quietly_and_tells_what_happened_meanwhile(
        kafka: KafkaSettings, threads: Threads) -> None:
    async with Receiver(SECRET.encode()) as hook:
        async with running(kafka, hook.url):
            await threads.interrupted("t1", "r1", "a", expires_at=soon(1))
            await threads.interrupted("t2", "r1", "b")
            await hook.wait_for(lambda: len(hook.accepted) == 3)
        first = {a.delivery_id for a in hook.accepted}
        assert sorted(_steps([a.event for a in hook.accepted])) == [
            ("expired", "r1", ["a"]), ("interrupted", "r1", ["a"]), ("interrupted", "r1", ["b"])]
        # while no notifier runs: t2 answered, t3 raised and expired
        await threads.resumed("t2", "r2", "b")
        await threads.interrupted("t3", "r1", "c", expires_at=soon(0.5))
        await asyncio.sleep(1.5)
        async with running(kafka, hook.url):
            await hook.wait_for(lambda: len(hook.accepted) == 6)
            await asyncio.sleep(1.0)  # anything repeated would arrive by now
    later = [a for a in hook.accepted if a.delivery_id not in first]
    assert [(a.event.thread_id, a.event.kind) for a in later if a.event.thread_id == "t3"] == [
        ("t3", "interrupted"), ("t3", "expired")]
    assert [(a.event.thread_id, a.event.kind) for a in later if a.event.thread_id != "t3"] == [
        ("t2", "answered")]
    assert all(hook.tries[i] == 1 for i in first), "nothing delivered before was sent again"
    assert len(hook.attempts) == 6


async def test_a_notification_waiting_for_a_retry_at_stop_is_delivered_by_the_next_start(
        kafka: KafkaSettings, threads: Threads) -> None:
    healthy = {"on": False}
    async with Receiver(SECRET.encode(),
                        lambda _i, _n, _e: 204 if healthy["on"] else 503) as hook:
        async with running(kafka, hook.url, retries=50, backoff_s=30):
            await threads.interrupted("t1", "r1", "a")
            await threads.resumed("t1", "r2", "a")
            await hook.wait_for(lambda: len(hook.attempts) == 1)
        healthy["on"] = True  # stopped during the backoff: nothing was committed past it
        async with running(kafka, hook.url):
            await hook.wait_for(lambda: len(hook.accepted) == 2)
    assert _steps([a.event for a in hook.accepted]) == [
        ("interrupted", "r1", ["a"]), ("answered", "r1", ["a"])]
    assert hook.tries[hook.accepted[0].delivery_id] == 2, "the same id, tried again"
