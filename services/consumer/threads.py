"""The thread view: every ThreadState of the compacted ``threads`` topic, in memory.

The gatekeeper writes one ThreadState per thread change (compacted, keyed by
threadId). Each consumer-service instance reads all partitions from the
beginning (tenant-wide, whichever partitions it owns of ``events``: the
interrupt inbox lists every thread's open interrupts from any instance, and
the topic holds one small record per thread, read per run, not per event)
and keeps the latest value of each thread as raw bytes, decoding only when
a route asks. A tombstone (null value) removes the thread. Memory
is therefore proportional to the compacted topic (one small record per live
thread); ``caught_up`` says when the startup backlog has been read, so a
route can tell "unknown thread" from "not read yet", and ``progress`` wakes a
route waiting for a thread's next state (``freshness``). ``listeners`` are
called with each record applied (the interrupt inbox's index: ``inbox_feed``).

With ``AGUI_STATE_DIR`` the states live in on-disk stores instead
(``threadstore``): the view restores them on start (only the records after
each store's checkpoint), tells the listeners of the threads marked as
holding open interrupts, reads on from the stores' offsets and writes each
batch it polls to its partition's store; memory is bounded by the cache. A
store that cannot be read answers ``503 thread_store_unavailable`` with
``Retry-After``, never an unknown thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

from contracts import ThreadState
from services.consumer.problems import RetryLater
from services.consumer.reading import BackgroundReader, Progress, wait_for_partitions
from services.consumer.threadstore import ThreadStore, decoded
from services.kafka.clients import KafkaError, TopicPartition, new_consumer
from services.runtime.settings import KafkaSettings
from services.state.disk import StoreError

log = logging.getLogger(__name__)

STORE_RETRY_S = 30
"""``Retry-After`` of a thread whose store cannot be read (healed by a restart, on another
instance sooner)."""


@contextlib.contextmanager
def _store_read() -> Iterator[None]:
    """A store failing is never "unknown thread": the state may well exist (503)."""
    try:
        yield
    except StoreError as exc:
        raise RetryLater("thread_store_unavailable",
                         "the thread view cannot read this thread's state now (its store is "
                         "failing; the instance is not ready)", STORE_RETRY_S) from exc


class ThreadView(BackgroundReader):
    """Latest ThreadState per threadId, materialised from the threads topic."""

    name = "thread-view"

    def __init__(self, kafka: KafkaSettings, store: ThreadStore | None = None) -> None:
        super().__init__(kafka)
        self.store = store
        """The on-disk stores (``AGUI_STATE_DIR``); None: every state in memory."""
        self.records_read = 0
        """Records the view read from the topic since it started (a restore's are the
        store's: ``ThreadStore.records_restored``)."""
        self.caught_up = asyncio.Event()
        self.failure: str | None = None
        """Why the view stopped (readiness says it), when it did."""
        self.progress = Progress()
        self._states: dict[str, bytes] = {}
        self.listeners: list[Callable[[str, bytes | None], None]] = []
        """Told of every record applied: (threadId, value or None for a tombstone)."""

    def __len__(self) -> int:
        return len(self._states)

    async def count(self) -> int:
        """How many threads the view holds: on disk, the stores' keys counted off the loop
        (the in-memory dict is empty then)."""
        if self.store is None:
            return len(self._states)
        return await asyncio.to_thread(self.store.count)

    def get(self, thread_id: str) -> ThreadState | None:
        """The thread's last known state, or None when the view has no record of it."""
        if self.store is not None:
            with _store_read():
                return self.store.get(thread_id)
        return decoded(thread_id, self._states.get(thread_id))

    def raw(self, thread_id: str) -> bytes | None:
        """The thread's last state record as the topic holds it (wire JSON), undecoded: for
        a reader that needs a part of a large state (the inbox's slim interrupts)."""
        if self.store is not None:
            with _store_read():
                return self.store.raw(thread_id)
        return self._states.get(thread_id)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record of the threads topic (tombstones delete)."""
        if key is None:
            return
        thread_id = key.decode("utf-8", "replace")
        if value is None:
            self._states.pop(thread_id, None)
        elif self.store is None:
            self._states[thread_id] = value
        for listener in self.listeners:
            listener(thread_id, value)

    async def _run(self) -> None:
        topic = self.kafka.topics.threads
        counts = await wait_for_partitions(self.kafka, (topic,))
        consumer = await self._start_consumer(lambda: new_consumer(
            self.kafka, "agui-consumer-threads", group_id=None, auto_offset_reset="earliest",
            max_poll_records=5000))
        parts = [TopicPartition(topic, p) for p in range(counts[topic])]
        consumer.assign(parts)
        if self.store is None:
            await consumer.seek_to_beginning(*parts)
        else:
            try:
                starts = await self.store.restore(self.kafka, [tp.partition for tp in parts])
            except Exception as exc:
                self.failure = f"its on-disk stores cannot be used: {type(exc).__name__}: {exc}"
                log.error("thread view stopped, %s", self.failure)
                raise
            for thread_id, value in self.store.marked():
                for listener in self.listeners:
                    listener(thread_id, value)
            for tp in parts:
                consumer.seek(tp, starts[tp.partition])
        ends = await consumer.end_offsets(parts)
        pending = {tp for tp in parts if ends[tp] > 0}
        if not pending:
            self.caught_up.set()
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            except KafkaError as exc:
                log.warning("thread view fetch failed, retrying: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for tp, records in batch.items():
                for record in records:
                    self.apply(record.key, record.value)
                self.records_read += len(records)
                if self.store is not None:
                    self.store.write(tp.partition, records)
            if batch:
                self.progress.moved()
            if pending:
                for tp in list(pending):
                    if await consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
                if not pending:
                    self.caught_up.set()
                    log.info("thread view caught up: %d threads", await self.count())
