"""Everything the topics hold about one thread: its live state, events and decisions.

A thread's records all sit in one partition of each topic (the key decides
it), so one thread is read by reading those partitions and keeping its key:
bounded by the topics' retention, not by the deployment. Used by the
operator tools (``threads show``, ``resume``, ``cancel``) and by the consumer
service's inbox (a thread's tool-call arguments and audit trail).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts import ThreadState
from services.kafka.reader import TopicReader
from services.kafka.records import OpsRecord, drop_duplicate_events, from_kafka, latest_states
from services.runtime.settings import KafkaSettings


@dataclass
class ThreadRecords:
    """What the topics hold about one thread."""

    thread_id: str
    state: ThreadState | None
    events: list[OpsRecord] = field(default_factory=list)
    decisions: list[OpsRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


async def _keyed(reader: TopicReader, topic: str, key: str, settings: KafkaSettings
                 ) -> list[OpsRecord]:
    tp = await reader.key_partition(topic, key)
    records = await reader.read_all([tp])
    converted = (from_kafka(r, settings.topics) for r in records)
    return [r for r in converted if r.key == key]


async def read_state(settings: KafkaSettings, thread_id: str) -> ThreadState | None:
    """The thread's live state on the compacted ``threads`` topic, if any."""
    async with TopicReader(settings, "agui-relay-ops") as reader:
        records = await _keyed(reader, settings.topics.threads, thread_id, settings)
    return latest_states(records)[0].get(thread_id)


async def read_thread(settings: KafkaSettings, thread_id: str, *, decisions: bool = True
                      ) -> ThreadRecords:
    """The thread's state, its events (duplicates dropped) and its decisions."""
    topics = settings.topics
    async with TopicReader(settings, "agui-relay-ops") as reader:
        states, warnings = latest_states(await _keyed(reader, topics.threads, thread_id,
                                                      settings))
        events = drop_duplicate_events(await _keyed(reader, topics.events, thread_id, settings))
        found = await _keyed(reader, topics.decisions, thread_id, settings) if decisions else []
    return ThreadRecords(thread_id, states.get(thread_id), events, found, warnings)
