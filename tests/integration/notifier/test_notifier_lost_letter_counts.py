"""A webhook whose dead letter was given up is counted lost, not dead-lettered.

When the broker refuses a given-up webhook's letter even minimal, the notification
is on no dead-letter topic: ``agui_dead_letters_lost_total`` counts it and one ERROR
("could not be dead-lettered") names it. It was counted in
``agui_webhook_dead_lettered_total`` as well, with a second ERROR saying "given up",
so an operator adding up dead-lettered webhooks looked for letters that do not exist
(found by probing).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from notifier_support import SECRET, Threads, running
from receiver import Receiver, always
from test_notifier_record_sizes import LOST, _deadletter_limit, _state

from services.runtime.metrics import sample_value
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

DEAD = ("agui_webhook_dead_lettered_total", {"kind": "interrupted"})


async def test_a_webhook_whose_letter_was_given_up_is_not_counted_dead_lettered(
        kafka: KafkaSettings, threads: Threads, caplog: pytest.LogCaptureFixture) -> None:
    await _deadletter_limit(kafka, 100)  # not even a minimal letter fits
    lost_before = sample_value(*LOST) or 0.0
    dead_before = sample_value(*DEAD) or 0.0
    caplog.set_level(logging.ERROR, logger="services.notifier.service")
    async with Receiver(SECRET.encode(), always(500)) as hook, \
            running(kafka, hook.url, retries=0):
        await threads.write(_state("big", "m" * 50_000))
        async with asyncio.timeout(30):
            while (sample_value(*LOST) or 0.0) < lost_before + 1:
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
    dead = (sample_value(*DEAD) or 0.0) - dead_before
    assert dead == 0, (
        f"agui_webhook_dead_lettered_total rose by {dead:g} for a webhook whose letter the "
        "broker refused and which is on no dead-letter topic (agui_dead_letters_lost_total "
        f"rose by {(sample_value(*LOST) or 0.0) - lost_before:g})")
    (error,) = [r for r in caplog.records if r.levelno == logging.ERROR
                and r.name == "services.notifier.service"]  # one ERROR, not two
    assert "could not be dead-lettered" in error.getMessage()
    assert getattr(error, "threadId", None) == "big"
