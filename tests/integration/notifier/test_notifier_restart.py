"""A notifier SIGKILLed mid-way: its successor delivers the rest, nothing lost, ids kept."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from notifier_support import SECRET, NotifierProcess, Threads
from receiver import Receiver

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREADS = 30


async def test_a_notifier_killed_mid_way_delivers_the_rest_on_restart(
        kafka: KafkaSettings, threads: Threads, tmp_path: Path) -> None:
    log = tmp_path / "notifier.log"
    env = {"AGUI_WEBHOOK_BACKOFF_S": "0.05", "AGUI_WEBHOOK_TIMEOUT_S": "2"}
    async with Receiver(SECRET.encode(), delay_s=0.1) as hook:
        first = NotifierProcess(kafka, hook.url, log, **env).start()
        try:
            await first.ready()
            for n in range(THREADS):
                await threads.interrupted(f"t{n}", "r1", "a")
                await threads.resumed(f"t{n}", "r2", "a")
            await hook.wait_for(lambda: len(hook.accepted) >= 12)
            metrics = await first.metrics()
            assert len(hook.accepted) < 2 * THREADS, "the kill must come mid-way"
            assert first.kill() == -signal.SIGKILL
        finally:
            first.close()
        assert 'agui_webhook_delivered_total{kind="interrupted"}' in metrics
        second = NotifierProcess(kafka, hook.url, log, **env).start()
        try:
            await second.ready()
            await hook.wait_for(lambda: len(hook.accepted) == 2 * THREADS, within_s=120)
            assert second.kill(signal.SIGTERM) == 0, second.log()
        finally:
            second.close()

    by_thread = hook.by_thread()
    assert sorted(by_thread) == sorted(f"t{n}" for n in range(THREADS))
    for events in by_thread.values():
        assert [(e.kind, e.run_id) for e in events] == [("interrupted", "r1"), ("answered", "r1")]
    assert all(a.signed for a in hook.attempts)
    bodies: dict[str, set[bytes]] = {}
    for a in hook.attempts:
        bodies.setdefault(a.delivery_id, set()).add(a.body)
    assert len(bodies) == 2 * THREADS, "a repeat is only ever the same notification"
    assert all(len(b) == 1 for b in bodies.values())
    text = log.read_text()
    assert SECRET not in text
    assert "do-not-log" not in text, "the URL's query (a token) is never logged"
    assert "restoring to offset" in text
