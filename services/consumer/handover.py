"""Rebalances lose no stream: what the fan-out does when partitions move.

The fan-out reads ``decisions`` and ``events`` as one member of the
consumer-service group (``ownership``). When the group rebalances (an
instance joins, leaves or dies), aiokafka revokes every partition of every
member, then hands out the new plan. Of the two ways to keep the streams
open on this instance whole, this module does the first: **the old owner
keeps reading a partition it lost for the streams already open on it, until
they end** (the other, ending them so the client continues with
``Last-Event-ID`` elsewhere, costs every client a reconnect on every
rebalance, and a POST waiting for its decision would have no stream to
continue). So:

1. on revocation (``Handover.on_partitions_revoked``) ownership is marked
   unsettled (requests wait for the new map rather than route by the old),
   and each revoked partition on which this instance has an open stream or
   a decision waiter goes to ``Linger``, a group-less reader that goes on
   from the exact position the group consumer had routed up to;
2. on assignment, a partition ``Linger`` holds comes back at *its*
   position, one revoked a moment ago at the one routed up to, and any
   other from ``REWIND_S`` seconds before its end (no stream here waits for
   its past: a request is routed here only once the new map is settled, and
   it subscribes before it publishes; but the run ends of the last moments
   are what read-your-writes needs, ``freshness``: a client may have read a
   run's end through the old owner a moment ago, and the gatekeeper's state
   for it may not be written yet); then the map is settled;
3. ``Linger`` drops a partition once nothing on this instance waits on it
   any more, and stops when it holds none.

Between the revocation and the new assignment, a record may be routed twice
(once by each reader); a stream's sequencer drops the second copy. A killed
instance's clients lose their connection instead: they reconnect to any
instance with ``Last-Event-ID`` (the replay route, forwarded to the new
owner), which is the other half of "no stream lost".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from services.consumer.ownership import Ownership
from services.kafka.clients import (
    AIOKafkaConsumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    KafkaError,
    TopicPartition,
    new_consumer,
)
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

Batch = Mapping[TopicPartition, Sequence[ConsumerRecord]]
Router = Callable[[Batch], None]

LINGER_POLL_MS = 200
REWIND_S = 5.0
"""A partition new to this instance is read from this long before its end: run ends a
client may have read through the old owner while the gatekeeper had not yet written the
state they produce (it does in tens of milliseconds; ``freshness`` waits at most
``AGUI_READ_YOUR_WRITES_S``)."""


def advanced(positions: dict[TopicPartition, int], batch: Batch) -> None:
    """Move ``positions`` past the records of ``batch`` just routed."""
    for tp, records in batch.items():
        if records:
            positions[tp] = records[-1].offset + 1


LINGER_RETRY_S = 1.0
"""How soon a lingering reader that failed is replaced."""


class Linger:
    """Reads partitions this instance lost, for the streams still open on them."""

    def __init__(self, kafka: KafkaSettings, route: Router,
                 busy: Callable[[], set[int]]) -> None:
        self.kafka = kafka
        self.route = route
        self.busy = busy
        self.positions: dict[TopicPartition, int] = {}
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def add(self, tp: TopicPartition, position: int) -> None:
        """Go on reading ``tp`` from ``position`` (not once stopped: the instance leaving
        the group is revoked everything)."""
        if self._closed:
            return
        self.positions[tp] = position
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="consumer-linger")

    def take(self, tp: TopicPartition) -> int | None:
        """Stop reading ``tp``; where it had got to (None: not read here)."""
        position = self.positions.pop(tp, None)
        if position is not None:
            self._dirty = True
        return position

    async def stop(self) -> None:
        self._closed = True
        self.positions.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        """Read the lingering partitions until none is left. A partition added while a
        reader stops is read by the next one: it had gone unread until the next
        rebalance, its open streams sending keep-alives only (found by review)."""
        while self.positions and not self._closed:
            if not await self._read():
                await asyncio.sleep(LINGER_RETRY_S)

    async def _read(self) -> bool:
        """One reader, until its partitions are all taken; False when it failed."""
        self._dirty = True  # a new consumer: assign and seek what is left
        consumer = new_consumer(self.kafka, "agui-consumer-linger", group_id=None,
                                auto_offset_reset="latest", max_poll_records=2000)
        try:
            await consumer.start()
            while self.positions:
                if self._dirty:
                    self._dirty = False
                    consumer.assign(list(self.positions))
                    for tp, position in self.positions.items():
                        consumer.seek(tp, position)
                try:
                    batch = await consumer.getmany(timeout_ms=LINGER_POLL_MS, max_records=2000)
                except KafkaError as exc:
                    log.warning("lingering reader fetch failed, retrying: %s", exc)
                    await asyncio.sleep(0.5)
                    continue
                kept = {tp: records for tp, records in batch.items() if tp in self.positions}
                self.route(kept)
                advanced(self.positions, kept)
                busy = self.busy()
                for tp in [tp for tp in self.positions if tp.partition not in busy]:
                    self.take(tp)
            return True
        except KafkaError as exc:
            log.error("lingering reader failed, starting another in %.0f s: %s",
                      LINGER_RETRY_S, exc)
            return False
        finally:
            await consumer.stop()


class Handover(ConsumerRebalanceListener):  # type: ignore[misc]
    """The fan-out's rebalance callbacks (steps 1 and 2 of the module docstring)."""

    def __init__(self, consumer: AIOKafkaConsumer, ownership: Ownership, linger: Linger,
                 positions: dict[TopicPartition, int], busy: Callable[[], set[int]],
                 owned_topic: str, settled: Callable[[], None]) -> None:
        self.consumer = consumer
        self.ownership = ownership
        self.linger = linger
        self.positions = positions
        """The group consumer's routed-up-to offsets, kept by the fan-out's loop."""
        self.busy = busy
        self.owned_topic = owned_topic
        self.settled = settled
        self.owners: tuple[str, ...] = ()
        """The map the last assignment told (``OwnersAssignor.told``)."""
        self._revoked: dict[TopicPartition, int] = {}

    def told(self, owners: tuple[str, ...]) -> None:
        self.owners = owners

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.ownership.unsettle()
        self._revoked = {tp: self.positions[tp] for tp in revoked if tp in self.positions}
        self.positions.clear()
        busy = self.busy()
        for tp, position in self._revoked.items():
            if tp.partition in busy:
                self.linger.add(tp, position)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Seek every assigned partition (step 2), with two requests for all the fresh ones
        together: awaiting a seek and a position per partition took 128 round trips on 64
        partitions, long enough for the group to drop the member and rebalance again."""
        at: dict[TopicPartition, int] = {}
        fresh = []
        for tp in assigned:
            position = self.linger.take(tp)
            if position is None:
                position = self._revoked.get(tp)
            if position is None:
                fresh.append(tp)
            else:
                at[tp] = position
        if fresh:
            at |= await self._rewound(fresh)
        self.positions.clear()
        for tp, position in at.items():
            self.consumer.seek(tp, position)
            self.positions[tp] = position
        self._revoked = {}
        mine = sorted(tp.partition for tp in assigned if tp.topic == self.owned_topic)
        self.ownership.update(mine, self.owners)
        log.info("consumer-service instance %s owns partitions %s",
                 self.ownership.url or "(unadvertised)", mine)
        self.settled()

    async def _rewound(self, fresh: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Where each partition new here is read from: ``REWIND_S`` before its end, or its
        end when nothing is that recent."""
        since = int((time.time() - REWIND_S) * 1000)
        found = await self.consumer.offsets_for_times(dict.fromkeys(fresh, since))
        rewound = {tp: hit.offset for tp, hit in found.items() if hit is not None}
        quiet = [tp for tp in fresh if tp not in rewound]
        if quiet:
            rewound |= await self.consumer.end_offsets(quiet)
        return rewound
