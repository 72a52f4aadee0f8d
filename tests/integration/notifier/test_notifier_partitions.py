"""One thread's failing webhook holds up its own partition only, never another one."""

from __future__ import annotations

import pytest
from notifier_support import SECRET, Threads, dead_letters, running
from receiver import HANG, Receiver

from contracts.webhooks import WebhookEvent
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

RETRIES = 3


def _thread_on(partition: int, partitions: int, name: str) -> str:
    n = 0
    while partition_for(f"{name}-{n}", partitions) != partition:
        n += 1
    return f"{name}-{n}"


async def test_a_thread_whose_webhook_hangs_holds_up_its_partition_only(
        kafka: KafkaSettings, threads: Threads) -> None:
    poison = "t-poison"
    held = partition_for(poison, kafka.partitions)
    behind = _thread_on(held, kafka.partitions, "t-behind")
    other = _thread_on((held + 1) % kafka.partitions, kafka.partitions, "t-other")

    def script(_id: str, _n: int, event: WebhookEvent) -> int:
        return HANG if event.thread_id == poison else 204

    def tried(thread_id: str) -> int:
        return sum(1 for a in hook.attempts if a.event.thread_id == thread_id)

    def accepted(thread_id: str) -> bool:
        return any(a.event.thread_id == thread_id for a in hook.accepted)

    poison_tries_when: dict[str, int] = {}

    def seen(thread_id: str) -> bool:
        if accepted(thread_id):
            poison_tries_when[thread_id] = tried(poison)
            return True
        return False

    async with Receiver(SECRET.encode(), script, hang_s=30) as hook, \
            running(kafka, hook.url, retries=RETRIES, backoff_s=0.5, timeout_s=2.0):
        await threads.interrupted(poison, "r1", "a")
        await hook.wait_for(lambda: tried(poison) >= 1, within_s=20)
        await threads.interrupted(behind, "r1", "b")
        await threads.interrupted(other, "r1", "c")
        await hook.wait_for(lambda: seen(other), within_s=60)
        await hook.wait_for(lambda: seen(behind), within_s=60)
        letters = await dead_letters(kafka, 1)
    assert poison_tries_when[other] <= RETRIES, (
        f"{other} was notified only once {poison} had used all its attempts")
    assert poison_tries_when[behind] == RETRIES + 1, (
        f"{behind} was notified before {poison}, ahead of it on their partition, had ended")
    assert [letter.code for letter in letters] == ["webhook_failed"]
