"""The notifier at the edges of record size: no partition wedged by its dead letters.

A dead letter the broker refuses for its size (the ``deadletter`` topic's
``max.message.bytes`` below it) is written minimal, and refused even so,
given up loudly: never retried as it was, which held every later
notification of its ``threads`` partition for ever.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from ag_ui.core import Interrupt
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.partitioner import murmur2
from notifier_support import SECRET, Threads, dead_letters, running
from receiver import Receiver, always

from contracts import OpenInterrupt, ThreadState
from services.kafka.clients import new_admin
from services.runtime.metrics import sample_value
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

LOST = ("agui_dead_letters_lost_total", {"service": "notifier", "reason": "webhook_failed"})


def _partition(key: str, partitions: int) -> int:
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def _state(thread_id: str, message: str, run_id: str = "r1") -> ThreadState:
    return ThreadState(
        thread_id=thread_id, status="interrupted", agent="approval", principal="acme",
        run_id=run_id, interrupted_run_id=run_id,
        open_interrupts=[OpenInterrupt(run_id=run_id, interrupt=Interrupt(
            id="i1", reason="tool_approval", message=message))],
        updated_at=datetime.now(UTC))


async def _deadletter_limit(kafka: KafkaSettings, max_bytes: int) -> None:
    admin = new_admin(kafka)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(
            ConfigResourceType.TOPIC, kafka.topics.deadletter,
            {"max.message.bytes": str(max_bytes)})])
    finally:
        await admin.close()


async def test_a_dead_letter_refused_for_its_size_does_not_wedge_the_partition(
        kafka: KafkaSettings, threads: Threads) -> None:
    await _deadletter_limit(kafka, 20_000)
    # two threads on one partition: a large notification first, a small one behind it
    assert _partition("big", kafka.partitions) == _partition("small1", kafka.partitions)
    async with Receiver(SECRET.encode(), always(500)) as hook, \
            running(kafka, hook.url, retries=0):
        await threads.write(_state("big", "m" * 50_000))
        await threads.interrupted("small1", "r1", "a")
        await hook.wait_for(lambda: len(hook.attempts) >= 1, within_s=30)
        try:
            letters = await dead_letters(kafka, 2, within_s=20)
        except TimeoutError:
            letters = await dead_letters(kafka, 0, within_s=5)
            pytest.fail(
                f"20 s after the webhook refused them, {len(letters)} of 2 notifications were "
                "dead-lettered: the letter for 'big' (over the deadletter topic's "
                "max.message.bytes) is retried for ever and 'small1', behind it on its "
                f"partition, is never attempted (webhook attempts: "
                f"{sorted({a.event.thread_id for a in hook.attempts})})")
    by_key = {letter.key: letter for letter in letters}
    assert set(by_key) == {"big", "small1"}
    big = by_key["big"]
    assert (big.value, big.headers, big.code) == ("", None, "webhook_failed"), "minimal"
    assert "refused by the broker as too large" in big.reason
    assert by_key["small1"].value, "a letter that fits is kept whole"


async def test_a_letter_refused_even_minimal_is_given_up_loudly(
        kafka: KafkaSettings, threads: Threads, caplog: pytest.LogCaptureFixture) -> None:
    await _deadletter_limit(kafka, 100)  # not even a minimal letter fits
    assert _partition("big", kafka.partitions) == _partition("small1", kafka.partitions)
    lost_before = sample_value(*LOST) or 0.0
    caplog.set_level(logging.ERROR, logger="services.notifier.service")
    async with Receiver(SECRET.encode(), always(500)) as hook, \
            running(kafka, hook.url, retries=0):
        await threads.write(_state("big", "m" * 50_000))
        await threads.interrupted("small1", "r1", "a")
        try:
            await hook.wait_for(lambda: {a.event.thread_id for a in hook.attempts} >= {
                "big", "small1"}, within_s=30)
        except TimeoutError:
            pytest.fail("'small1', behind 'big' on its partition, was never attempted: the "
                        "letter for 'big', refused even minimal, is retried for ever")
        async with asyncio.timeout(20):
            while (sample_value(*LOST) or 0.0) < lost_before + 2:
                await asyncio.sleep(0.1)
    partition = _partition("big", kafka.partitions)
    lost = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR
            and "could not be dead-lettered" in r.getMessage()]
    assert [m.split(" (")[0] for m in lost] == \
        [f"{kafka.topics.threads} p{partition}@0", f"{kafka.topics.threads} p{partition}@1"]
    assert all("refused by the broker as too large" in m for m in lost)
