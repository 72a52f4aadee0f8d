"""Replays whose clients hang up after the run's end give their log readers back.

A 30-minute soak (two instances, ~18 runs/s, ~3.5 replays/s, clients that read a
replay to its ``RUN_FINISHED`` and hang up) saw ``agui_consumer_stream_log_readers``
rise on both instances until it reached ``AGUI_STREAM_LOG_READERS`` (64) after about 4
minutes with no stream open; from then on every replay was answered ``503
replay_busy``, for good, and a stream falling behind the fan-out would have waited for a
reader for ever. ``scan_run`` awaited its consumer's (shielded) stop and only then gave
the reader back: the client's hang-up cancelled that await, and the release was skipped.

Here the consumer's stop is made to take 0.3 s (a broker answering slowly; in the soak
it took the few ms the client's hang-up needed) so the race is hit every time.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from consumer_harness import Backstage, finished, serving, started, text
from slow_sse import until
from test_consumer_replay_scans import remembering

from services.consumer import replay as replay_module
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

READERS = 3


def slow_stopping(monkeypatch: pytest.MonkeyPatch) -> None:
    real = replay_module.new_consumer

    def made(*args: Any, **kwargs: Any) -> Any:
        consumer = real(*args, **kwargs)
        stop = consumer.stop

        async def slow_stop() -> None:
            await asyncio.sleep(0.3)
            await stop()

        consumer.stop = slow_stop
        return consumer

    monkeypatch.setattr(replay_module, "new_consumer", made)


async def test_clients_hanging_up_after_the_end_do_not_use_up_the_log_readers(
        kafka: KafkaSettings, backstage: Backstage, monkeypatch: pytest.MonkeyPatch) -> None:
    slow_stopping(monkeypatch)
    async with serving(kafka, stream_log_readers=READERS) as app:
        tail = app.relay.fanout.tail
        assert tail is not None
        runs = []
        for _ in range(READERS + 1):
            thread, run = f"lr-{uuid.uuid4().hex[:8]}", "r1"
            await backstage.emit(thread, run, [started(thread, run), *text("m1", "hi"),
                                               finished(thread, run)])
            await backstage.write_state(remembering(thread, run), thread)
            runs.append((thread, run))
        await until(lambda: all(app.relay.threads.get(t) is not None for t, _ in runs),
                    "the runs' ends")
        statuses = []
        for thread, run in runs[:READERS]:
            # a client that reads the replay up to the run's end, then hangs up
            async with app.http.stream("GET", f"/threads/{thread}/runs/{run}/events") as resp:
                statuses.append(resp.status_code)
                async for line in resp.aiter_lines():
                    if "RUN_FINISHED" in line:
                        break
        await asyncio.sleep(1.5)  # every stop done, every response closed
        held = tail.active
        thread, run = runs[READERS]
        after = await app.http.get(f"/threads/{thread}/runs/{run}/events")
    assert statuses == [200] * READERS
    assert (held, after.status_code) == (0, 200), (
        f"{held} of {READERS} log readers still held with no replay open; the next replay: "
        f"{after.status_code} {after.text}")
