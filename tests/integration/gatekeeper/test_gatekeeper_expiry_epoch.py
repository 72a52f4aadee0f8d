"""The expirer's batch of threads lapsing together, with one thread started "at the epoch".

The due threads of a partition are read from the earliest of their starts
(``runStartedAt`` less a minute). A state whose ``runStartedAt`` lies within the first
minute of the epoch (a foreign or corrupt state record on the gatekeeper's changelog)
made that start negative, and ``offsets_for_times`` refuses a negative timestamp: the
whole partition's read failed, and every other thread due with it was "not sent,
trying again", every second, for ever (found by probing). A start at or before the
epoch now reads from the beginning.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from ag_ui.core import Interrupt
from gatekeeper_harness import Topics
from test_gatekeeper_mass_expiry import _events

from contracts import EventHeaders, OpenInterrupt, ThreadState
from services.gatekeeper.expirer import Expirer
from services.kafka.clients import TopicPartition
from services.kafka.reader import TopicReader
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_one_thread_started_at_the_epoch_holds_back_no_other_lapsing_thread(
        kafka: KafkaSettings, topics: Topics, caplog: pytest.LogCaptureFixture) -> None:
    now = datetime.now(UTC)
    producer = topics._producer
    states: dict[str, ThreadState] = {}
    starts = {"fine": now - timedelta(seconds=1),
              "ancient": datetime(1970, 1, 1, 0, 0, 30, tzinfo=UTC)}
    for n, (thread, started) in enumerate(starts.items()):
        for seq, event in enumerate(_events(thread, n)):
            await producer.send(kafka.topics.events, orjson.dumps(event), key=thread.encode(),
                                partition=0, headers=EventHeaders(f"run-{n}", event["type"],
                                                                  "approval", seq).encode())
        states[thread] = ThreadState(
            thread_id=thread, status="interrupted", principal="ta", agent="approval",
            run_id=f"run-{n}", interrupted_run_id=f"run-{n}", recent_run_ids=[f"run-{n}"],
            updated_at=now, run_started_at=started,
            open_interrupts=[OpenInterrupt(run_id=f"run-{n}", interrupt=Interrupt(
                id=f"approve-{n}", reason="input",
                expires_at=(now - timedelta(seconds=1)).isoformat()))])
    await producer.flush()

    expirer = Expirer(kafka, "probe-f-expiry", lambda: datetime.now(UTC),
                      lambda _p, thread: states.get(thread))
    expirer.restored(0, states.values())
    stop = asyncio.Event()
    task = asyncio.create_task(expirer.run(stop))
    try:
        async with asyncio.timeout(8):
            while expirer.sent < 2:
                await asyncio.sleep(0.05)
    except TimeoutError:
        pass
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    retried = sum("fine" in r.getMessage() and "trying again" in r.getMessage()
                  for r in caplog.records)
    async with TopicReader(kafka, "probe-f-expiry-check") as reader:
        records = await reader.read_all([TopicPartition(kafka.topics.requests, 0)])
    assert sorted(r.key for r in records) == [b"ancient", b"fine"], (
        f"{expirer.sent} resumes sent; 'fine' not sent and retried {retried} times: "
        + "; ".join({r.getMessage()[:200] for r in caplog.records if "fine" in r.getMessage()}))
