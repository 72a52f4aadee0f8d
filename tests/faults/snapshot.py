"""Reading what the checker judges: the output topics, and the approval ledger.

``Snapshot`` assigns every partition of the topics the checker judges
(requests, decisions, every ``dispatch.<agent>``, events, threads,
deadletter), with no consumer group and ``read_committed``, and reads each
up to the end offsets (last stable offsets) it finds when ``refresh()`` is
called. Records accumulate across refreshes, so waiting for a system to
settle re-reads only what is new. ``check()`` refreshes and judges until the
report is clean or a deadline passes: runs a killed worker left open are
closed by its successor a little later, and a checker that judged too early
would blame it.

Side effects are not on a topic: the ``approval`` sample agent appends one
JSON line per execution to the file named by ``AGUI_APPROVAL_LEDGER``
(every worker of a deployment to the same file); ``read_ledger`` reads it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from faults.checker import Execution, Rec, Records, Report, judge
from services.kafka.clients import AIOKafkaConsumer, TopicPartition, new_admin, new_consumer
from services.runtime.settings import KafkaSettings

ExecutionReader = Callable[[], list[Execution]]
"""Reads the side effects performed so far."""


def read_ledger(path: Path) -> list[Execution]:
    """The executions the ``approval`` agent recorded in its ledger file (none if absent)."""
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        if line.strip():
            raw = orjson.loads(line)
            out.append(Execution(str(raw["threadId"]), str(raw["interruptId"]),
                                 str(raw.get("runId"))))
    return out


def _rec(r: Any) -> Rec:
    return Rec(r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers or ()),
               r.timestamp)


class Snapshot:
    """An accumulating, group-less, read-committed reader of one deployment's topics."""

    def __init__(self, settings: KafkaSettings,
                 executions: ExecutionReader | None = None) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.records = Records(requests_topic=self.topics.requests)
        self._executions = executions
        self._consumer: AIOKafkaConsumer | None = None
        self._assigned: list[TopicPartition] = []

    async def __aenter__(self) -> Snapshot:
        self._consumer = new_consumer(self.settings, "agui-faults-checker", group_id=None,
                                      max_poll_records=2000)
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def _topics(self) -> dict[str, int]:
        """Topic → partition count for every topic of this deployment that exists."""
        admin = new_admin(self.settings, "agui-faults-checker-admin")
        await admin.start()
        try:
            prefix = f"{self.topics.prefix}."
            names = [n for n in await admin.list_topics() if n.startswith(prefix)]
            described = await admin.describe_topics(names) if names else []
        finally:
            await admin.close()
        return {d["topic"]: len(d["partitions"]) for d in described
                if d.get("error_code", 0) == 0}

    def _role(self, topic: str) -> list[Rec] | None:
        t = self.topics
        roles: dict[str, list[Rec]] = {
            t.requests: self.records.requests,
            t.decisions: self.records.decisions,
            t.events: self.records.events,
            t.runs: self.records.runs,
            t.threads: self.records.threads,
            t.deadletter: self.records.deadletters,
        }
        if topic in roles:
            return roles[topic]
        if topic.startswith(f"{t.prefix}.dispatch."):
            return self.records.dispatches
        return None

    async def refresh(self) -> Records:
        """Read what was committed since the last refresh, up to the current end offsets."""
        consumer = self._consumer
        assert consumer is not None, "use Snapshot as an async context manager"
        wanted = [TopicPartition(topic, p) for topic, n in sorted((await self._topics()).items())
                  if self._role(topic) is not None for p in range(n)]
        new = [tp for tp in wanted if tp not in self._assigned]
        if new:
            self._assigned = self._assigned + new
            consumer.assign(self._assigned)
            await consumer.seek_to_beginning(*new)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(self._assigned)
        while True:
            behind = [tp for tp in self._assigned if await consumer.position(tp) < ends[tp]]
            if not behind:
                break
            got = await consumer.getmany(*behind, timeout_ms=500)
            for tp, batch in got.items():
                target = self._role(tp.topic)
                assert target is not None
                target.extend(_rec(r) for r in batch if r.offset < ends[tp])
        if self._executions is not None:
            self.records.executions = self._executions()
        return self.records

    def judge(self) -> Report:
        return judge(self.records)


async def check(
    settings: KafkaSettings,
    *,
    executions: ExecutionReader | None = None,
    settle_s: float = 60.0,
    interval_s: float = 1.0,
) -> Report:
    """Read and judge until the report is clean or ``settle_s`` seconds have passed."""
    deadline = time.monotonic() + settle_s
    async with Snapshot(settings, executions) as snapshot:
        while True:
            await snapshot.refresh()
            report = snapshot.judge()
            if report.ok or time.monotonic() >= deadline:
                return report
            await asyncio.sleep(interval_s)
