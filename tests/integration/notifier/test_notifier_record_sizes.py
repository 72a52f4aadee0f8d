"""The notifier at the edges of record size: no partition wedged, no webhook of any size.

A dead letter the broker refuses for its size (the ``deadletter`` topic's
``max.message.bytes`` below it) is written minimal, and refused even so,
given up loudly: never retried as it was, which held every later
notification of its ``threads`` partition for ever. And a ``threads``
record past ``AGUI_MAX_RECORD_BYTES`` (written compressed, so the broker's
limit, which counts compressed bytes, takes it) is dead-lettered
``record_too_large`` instead of being decoded and POSTed whole.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from ag_ui.core import Interrupt
from aiokafka import AIOKafkaProducer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.partitioner import murmur2
from notifier_support import SECRET, Threads, dead_letters, running
from receiver import Receiver, always

from contracts import OpenInterrupt, ThreadState, encode
from services.kafka.clients import new_admin
from services.kafka.deadletters import DEAD_LETTER_VALUE_LIMIT
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


async def test_a_threads_record_past_the_record_limit_is_not_posted_whole(
        kafka: KafkaSettings, threads: Threads) -> None:
    value = encode(_state("bomb", "m" * (4 << 20)))
    assert len(value) > 4 * kafka.max_record_bytes
    async with Receiver(SECRET.encode()) as hook, running(kafka, hook.url, retries=0):
        writer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers,
                                  compression_type="gzip", max_request_size=16 << 20)
        await writer.start()
        try:  # megabytes of value, a few KB on the wire: the broker's limit takes it
            await writer.send_and_wait(kafka.topics.threads, value, key=b"bomb")
        finally:
            await writer.stop()
        await threads.write(_state("bomb", "a later question", run_id="r2"))
        await hook.wait_for(lambda: any(a.event.run_id == "r2" for a in hook.accepted),
                            within_s=30)
        posted = max((len(a.body) for a in hook.attempts), default=0)
        assert posted <= kafka.max_record_bytes, (
            f"a threads record of {len(value):,} bytes (AGUI_MAX_RECORD_BYTES "
            f"{kafka.max_record_bytes:,}) was decoded and POSTed as a {posted:,}-byte webhook "
            "body instead of being refused (dead-lettered record_too_large)")
        (letter,) = await dead_letters(kafka, 1, within_s=30)
    assert [a.event.run_id for a in hook.accepted] == ["r2"], "the partition moves on"
    assert (letter.code, letter.service, letter.key) == ("record_too_large", "notifier", "bomb")
    assert (letter.source_topic, letter.offset) == (kafka.topics.threads, 0)
    assert len(letter.value) == DEAD_LETTER_VALUE_LIMIT, "the letter's value cut"
    assert f"the threads record is {len(value)} bytes" in letter.reason


async def test_a_record_past_the_limit_is_dead_lettered_once_across_a_restart(
        kafka: KafkaSettings, threads: Threads) -> None:
    value = encode(_state("bomb", "m" * (2 << 20)))
    async with Receiver(SECRET.encode()) as hook:
        async with running(kafka, hook.url, retries=0):
            writer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers,
                                      compression_type="gzip", max_request_size=16 << 20)
            await writer.start()
            try:
                await writer.send_and_wait(kafka.topics.threads, value, key=b"bomb")
            finally:
                await writer.stop()
            await dead_letters(kafka, 1, within_s=30)
        async with running(kafka, hook.url, retries=0):  # restores past it from the commit
            await threads.write(_state("bomb", "after the restart", run_id="r3"))
            await hook.wait_for(lambda: any(a.event.run_id == "r3" for a in hook.accepted),
                                within_s=30)
    with pytest.raises(TimeoutError):
        await dead_letters(kafka, 2, within_s=3)
