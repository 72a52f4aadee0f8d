"""``requests`` grown past AGUI_PARTITIONS under a relay (``kafka-topics --alter``).

The relay places a thread among ``AGUI_PARTITIONS`` partitions of every topic
(``services.kafka.partitioning``), so growing one topic changes nothing for
the records it writes itself: a thread whose hash among the new count differs
is still answerable. What an outside client writes with Kafka's default
partitioner (hashing among the topic's current count) can now land where
the relay does not hold its thread: on a partition past AGUI_PARTITIONS,
where it waits undecided and ``agui-relay lag`` must show it; or on another
thread's partition below, where the gatekeeper dead-letters it as
``misrouted`` instead of deciding it against no state. HTTP ports come from
``GROWN_TOPICS_PORT_BASE`` when it is set (three of them), else free ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import NewPartitions
from faults.load import resume_all, run_input

from hostile.client import Tenant, finished
from hostile.stack import TENANTS, UpStack
from hostile.topics import dead_letter, envelope
from services.cli.up import SAMPLE_AGENTS, agent_names
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_admin
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.hostile

PARTITIONS = 8  # AGUI_PARTITIONS' default, which UpStack leaves as it is
GROWN = 12
ROOT = Path(__file__).resolve().parents[2]


def grown_stack(bootstrap: str, workdir: Path) -> UpStack:
    base = os.environ.get("GROWN_TOPICS_PORT_BASE")
    if base is None:
        return UpStack(bootstrap, workdir)
    return UpStack(bootstrap, workdir, http_port=int(base), health_base=int(base) + 1)


def start_without(stack: UpStack, *not_waited: str, ready_s: float = 90.0) -> None:
    """``stack.start()`` except that the services in ``not_waited`` need not be ready."""
    stack.log_dir.mkdir(parents=True, exist_ok=True)
    env = {**stack.env(), "PYTHONPATH": str(ROOT)}
    with stack.up_log.open("ab") as out:
        stack.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "agui-relay"), "up"], cwd=ROOT, env=env,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    waiting = {k: v for k, v in stack.readyz_urls().items() if k not in not_waited}
    deadline = time.monotonic() + ready_s
    with httpx.Client(timeout=2.0) as client:
        while waiting and time.monotonic() < deadline:
            assert stack.process.poll() is None, stack.output()[-3000:]
            for name, url in list(waiting.items()):
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url).status_code == 200:
                        del waiting[name]
            time.sleep(0.5)
    assert not waiting, f"not ready: {sorted(waiting)}\n{stack.output()[-3000:]}"
    stack.pids = stack.find_children()


async def add_partitions(settings: KafkaSettings, topic: str, total: int) -> None:
    admin = new_admin(settings, "grown-topics-alter")
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        await admin.close()


async def publish_as_outsider(settings: KafkaSettings, topic: str, key: str,
                              value: bytes) -> tuple[int, int]:
    """Write one record as another client would: aiokafka's default partitioner, which
    hashes the key among the topic's partitions now. Its (partition, offset)."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    await producer.start()
    try:
        sent = await producer.send_and_wait(topic, value, key=key.encode())
    finally:
        await producer.stop()
    return int(sent.partition), int(sent.offset)


def thread_where(tag: str, wanted: Callable[[int, int], bool]) -> str:
    """A fresh thread id whose (partition among 8, partition among 12) ``wanted`` takes."""
    while True:
        tid = f"gt-{tag}-{uuid.uuid4().hex[:10]}"
        if wanted(partition_for(tid, PARTITIONS), partition_for(tid, GROWN)):
            return tid


def moved(old: int, new: int) -> bool:
    """Placed elsewhere among 12, on a partition the gatekeeper decides (below 8)."""
    return new < PARTITIONS and new != old


def lag_rows(stack: UpStack) -> list[dict[str, object]]:
    done = subprocess.run([str(Path(sys.executable).parent / "agui-relay"), "lag", "--json"],
                          env={**stack.env(), "PYTHONPATH": str(ROOT)},
                          capture_output=True, timeout=60, check=False)
    return [orjson.loads(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def requests_grown(kafka_bootstrap: str,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    """A relay whose ``requests`` topic an operator grew from 8 to 12 partitions
    (``kafka-topics --alter --partitions 12``) before the services (re)started."""
    stack = grown_stack(kafka_bootstrap, tmp_path_factory.mktemp("grown-topics"))
    asyncio.run(ensure_topics(stack.settings, agent_names(SAMPLE_AGENTS)))
    asyncio.run(add_partitions(stack.settings, stack.settings.topics.requests, GROWN))
    try:
        # the gatekeeper is rightly not ready (requests 8-11 are paused): wait for the rest
        start_without(stack, "gatekeeper")
        yield stack
    finally:
        stack.kill()


async def test_requests_grown_keeps_threads_answerable(requests_grown: UpStack) -> None:
    """A thread whose partition among 12 differs from its partition among 8 is started
    and interrupted; its resume finishes the run. Before, the consumer service published
    its requests with the default partitioner (among 12) while its runs' ends went to
    ``runs`` p(among 8): the gatekeeper's state of it stayed running for ever and every
    resume was answered 409 thread_busy (or 404 unknown_thread)."""
    tid = thread_where("moved", moved)
    async with Tenant(requests_grown.url, TENANTS["tenant-a"]) as tenant:
        first = await tenant.run("approval", run_input(tid, f"{tid}-r1", text="Clean up"),
                                 timeout_s=30)
        interrupts = finished(first, "interrupt")["outcome"]["interrupts"]
        await asyncio.sleep(1.0)
        second = await tenant.run("approval", resume_all(tid, f"{tid}-r2", interrupts,
                                                         {"approved": True}), timeout_s=30)
    where = (f"thread {tid} (p{partition_for(tid, PARTITIONS)} among {PARTITIONS}, "
             f"p{partition_for(tid, GROWN)} among {GROWN})")
    assert second.status == 200, (f"{where} cannot be resumed after requests grew to {GROWN} "
                                  f"partitions: {second.status} {second.problem}")
    assert second.ending is not None, f"{where}: the resumed run did not end: {second.error}"
    finished(second, "success")


async def test_requests_grown_thread_past_the_old_count_is_decided(
        requests_grown: UpStack) -> None:
    """A thread the default partitioner would put on a new partition (8-11, paused) is
    still decided when it comes through the relay. Before: 504 decision_timeout."""
    tid = thread_where("new", lambda old, new: new >= PARTITIONS)
    async with Tenant(requests_grown.url, TENANTS["tenant-a"], timeout_s=20) as tenant:
        run = await tenant.run("scripted", run_input(tid, f"{tid}-r1", script={"text": "x"}),
                               timeout_s=20)
    assert run.status == 200, (run.status, run.problem, run.events[-1:])
    finished(run, "success")


async def test_requests_grown_undecided_request_shows_in_lag(requests_grown: UpStack) -> None:
    """A request another client wrote onto a new requests partition (8-11) is never
    decided (its partition is paused); ``agui-relay lag`` is where an operator looks for
    it. Before, lag listed only partitions with a committed offset, so the gatekeeper's
    group showed a lag of 0 there while the request waited."""
    settings, topic = requests_grown.settings, requests_grown.settings.topics.requests
    async with Tenant(requests_grown.url, TENANTS["tenant-a"]) as tenant:  # commits requests
        seed = thread_where("seed", lambda old, new: new == old)
        finished(await tenant.run("scripted", run_input(seed, f"{seed}-r1",
                                                        script={"text": "x"})))
    tid = thread_where("outside", lambda old, new: new >= PARTITIONS)
    doc = envelope(run_input(tid, f"{tid}-r1", script={"text": "x"}))
    p, _ = await publish_as_outsider(settings, topic, tid, orjson.dumps(doc))
    assert p == partition_for(tid, GROWN) >= PARTITIONS
    group = f"{requests_grown.prefix}.gatekeeper"
    gatekeeper: list[dict[str, object]] = []
    for _ in range(10):  # the gatekeeper commits its offsets in the background
        gatekeeper = [r for r in lag_rows(requests_grown)
                      if r["group"] == group and r["topic"] == topic]
        if any(r["partition"] == p and int(str(r["lag"])) >= 1 for r in gatekeeper):
            return
        await asyncio.sleep(1.0)
    raise AssertionError(f"request of thread {tid} sits undecided on {topic} p{p}, but "
                         f"'agui-relay lag' shows for the gatekeeper on {topic}: "
                         f"{[(r['partition'], r['lag']) for r in gatekeeper]}")


async def test_requests_grown_misrouted_request_is_dead_lettered(
        requests_grown: UpStack) -> None:
    """A request another client wrote with the default partitioner onto a partition the
    gatekeeper decides (below 8) but not its thread's is dead-lettered ``misrouted``,
    naming both partitions and the likely cause. Before, it was decided against the
    wrong partition's (empty) state: a second copy of the thread."""
    settings, topic = requests_grown.settings, requests_grown.settings.topics.requests
    tid = thread_where("astray", moved)
    doc = envelope(run_input(tid, f"{tid}-r1", script={"text": "x"}))
    where = await publish_as_outsider(settings, topic, tid, orjson.dumps(doc))
    assert where[0] == partition_for(tid, GROWN) != partition_for(tid, PARTITIONS)
    letter = await dead_letter(settings, topic, *where, within_s=30.0)
    assert letter is not None, f"no dead letter for the misrouted request at {topic} {where}"
    assert letter.code == "misrouted", letter
    assert f"partition {where[0]}" in letter.reason, letter.reason
    assert f"partition {partition_for(tid, PARTITIONS)}" in letter.reason, letter.reason
    assert "AGUI_PARTITIONS" in letter.reason, letter.reason
