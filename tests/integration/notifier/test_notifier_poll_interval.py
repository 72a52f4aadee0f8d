"""A retry schedule longer than the group's poll interval still ends in a dead letter."""

from __future__ import annotations

from typing import Any

import pytest
from notifier_support import SECRET, Threads, dead_letters, running
from receiver import Receiver

from services.kafka.clients import AIOKafkaConsumer
from services.notifier import service as notifier_service
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_a_schedule_longer_than_the_poll_interval_still_ends_in_a_dead_letter(
        kafka: KafkaSettings, threads: Threads, monkeypatch: pytest.MonkeyPatch) -> None:
    made = notifier_service.new_consumer

    def short_poll_interval(*args: Any, **kwargs: Any) -> AIOKafkaConsumer:
        consumer = made(*args, **kwargs)
        consumer._max_poll_interval_ms = 6_000  # stands in for aiokafka's 300 s
        return consumer

    monkeypatch.setattr(notifier_service, "new_consumer", short_poll_interval)
    # three attempts of 3 s, backoffs of 2 s and 4 s: 15 s in all, past the 6 s interval
    async with Receiver(SECRET.encode(), lambda *_: 500, delay_s=3.0) as hook, \
            running(kafka, hook.url, retries=2, backoff_s=2.0, timeout_s=3.5,
                    session_timeout_ms=6_000):
        await threads.interrupted("t-slow-dead", "r1", "a")
        letters = await dead_letters(kafka, 1, within_s=60)
    assert len(letters) == 1
    assert list(hook.tries.values()) == [3], "the schedule ran once, never from attempt 1 again"
