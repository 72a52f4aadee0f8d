"""A consumer-service instance starting on 64 partitions, its thread view on disk.

Its first assignment seeks every partition of ``decisions`` and ``events`` new to it
with a request for them all, not a seek and a position awaited per partition inside the
rebalance callback (128 round trips: 16 s on 64 partitions, after which the group
dropped the member and rebalanced again); and its "thread view caught up" line counts
the threads its stores hold, not the in-memory dict they replace.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from contracts import ThreadState
from deploy.kafka.probe import free_port
from services.gatekeeper import wire
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_producer
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
PARTITIONS = 64
THREADS = 500
READY_S = 120.0
SESSION_S = 6.0
"""The consumer group's session (``services/consumer/streams.py`` SESSION_TIMEOUT_MS)."""


async def _prepare(settings: KafkaSettings) -> None:
    await ensure_topics(settings, ("scripted",))
    producer = new_producer(settings, "many-partitions")
    await producer.start()
    try:
        for i in range(THREADS):
            thread_id = f"mp-{i}"
            state = ThreadState(thread_id=thread_id, status="idle", agent="scripted",
                                run_id=f"r{i}", recent_run_ids=[f"r{i}"])
            await producer.send(settings.topics.threads, wire.state(state),
                                key=thread_id.encode(),
                                partition=partition_for(thread_id, PARTITIONS))
        await producer.flush()
    finally:
        await producer.stop()


def _lines(log: Path) -> list[dict[str, object]]:
    out = []
    for raw in log.read_bytes().splitlines():
        try:
            out.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            continue
    return out


@pytest.fixture(scope="module")
def started(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[list[dict[str, object]], float]]:
    """One instance started on 64 partitions holding 500 threads; its log a while after
    it first answered /readyz, and how long that took."""
    tmp = tmp_path_factory.mktemp("many-partitions")
    prefix = f"mp{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix,
                             partitions=PARTITIONS)
    asyncio.run(_prepare(settings))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    env |= {"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "AGUI_TOPIC_PREFIX": prefix,
            "AGUI_PARTITIONS": str(PARTITIONS), "AGUI_HTTP_HOST": "127.0.0.1",
            "AGUI_HTTP_PORT": str(port), "AGUI_STATE_DIR": str(tmp / "state"),
            "AGUI_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"}
    log = tmp / "consumer.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "services.consumer"], cwd=REPO,
                                env=env, stdout=out, stderr=out)
    try:
        began = time.monotonic()
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() - began < READY_S, log.read_text()[-3000:]
            time.sleep(0.2)
        ready_s = time.monotonic() - began
        time.sleep(SESSION_S)
        yield _lines(log), ready_s
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _at(line: dict[str, object]) -> float:
    from datetime import datetime
    return datetime.fromisoformat(str(line["ts"])).timestamp()


def test_first_assignment_of_64_partitions_is_not_serialised_per_partition(
        started: tuple[list[dict[str, object]], float]) -> None:
    lines, ready_s = started
    joining = next(x for x in lines if str(x.get("msg", "")).startswith("fan-out joining"))
    owns = next(x for x in lines if "owns partitions" in str(x.get("msg", "")))
    took = _at(owns) - _at(joining)
    assert took < SESSION_S, (
        f"from joining the group to owning its partitions: {took:.1f} s "
        f"(ready after {ready_s:.1f} s) on {PARTITIONS} empty-ish partitions")


def test_a_new_instance_is_not_dropped_by_its_group_right_after_joining(
        started: tuple[list[dict[str, object]], float]) -> None:
    lines, _ = started
    dropped = [x["msg"] for x in lines if "member_id was not recognized" in str(x.get("msg"))]
    assert dropped == [], f"the group dropped the new member after its first assignment: {dropped}"


def test_thread_view_caught_up_line_counts_the_threads_on_disk(
        started: tuple[list[dict[str, object]], float]) -> None:
    lines, _ = started
    said = [str(x["msg"]) for x in lines if "thread view caught up" in str(x.get("msg"))]
    assert said, "no 'thread view caught up' line"
    assert said[0] == f"thread view caught up: {THREADS} threads", (
        f"{THREADS} threads on the topic, the log says: {said[0]!r}")
