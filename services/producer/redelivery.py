"""A run's records the broker could not take for now: the run holds and sends them again.

While a cluster is down or coming back (every node killed, leaders still
being elected, too few replicas in sync), a record's delivery fails with a
retriable error once aiokafka's delivery timeout (40 s) has passed. Every
worker of a deployment meets the same outage, so none may stop on it (that
would stop the whole worker tier): the run holds instead — it publishes
nothing new, its agent waits on the run's queue — and sends again, in
order, every record from the first one that failed on, until the broker
has acknowledged them all, backing off between attempts. Nothing of the run
overtakes a record that failed: the run sends nothing new while it holds,
and one the producer would not even take is sent again before the next.
A record of the run the broker took after an earlier one failed (a batch
that expired while no leader was known, and a later one written once one
was) leaves a hole that cannot be filled in order, so the run ends there
with RUN_ERROR ``publish_failed`` (``RecordsLostError``). Before sending
again the producer's sequence numbers start over
(``services.kafka.sequence_gaps``: the failed batch left a gap the broker
would refuse every later batch for).

A refusal that is not retriable (a record too large, no authorisation) is
left at the head of the deliveries for the sink to raise. A run that holds
past its partition's ownership is cancelled by its host (``host._release``):
the partition's next owner closes it, as for a worker that died.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, NamedTuple

from aiokafka.errors import KafkaError, KafkaTimeoutError, OutOfOrderSequenceNumber

from services.kafka import sequence_gaps
from services.producer.publish import RunWriter
from services.producer.sink import EventRecord

log = logging.getLogger(__name__)

BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
"""The wait before each attempt of a series (the last one repeats)."""
REPORT_EVERY_S = 60.0
"""How often a run still holding says so again (its first failure is always logged)."""


class Delivery(NamedTuple):
    """One record sent: the producer's future, the record, and the topic it went to."""

    future: asyncio.Future[Any]
    record: EventRecord
    topic: str


def retriable(exc: BaseException) -> bool:
    """True when the broker may take the write later: aiokafka's retriable errors (no
    leader, too few replicas, no connection), its delivery timeout, and a batch refused
    behind the sequence gap an earlier failed delivery left."""
    return isinstance(exc, KafkaError) and (
        exc.retriable or isinstance(exc, KafkaTimeoutError | OutOfOrderSequenceNumber))


def failure(future: asyncio.Future[Any]) -> BaseException | None:
    """How ``future`` failed, or None (a send cancelled by the producer's stop: failed)."""
    if future.cancelled():
        cancelled: BaseException = KafkaError("the delivery was cancelled: the producer stopped")
        return cancelled
    return future.exception()


def failed(exc: BaseException) -> asyncio.Future[Any]:
    """A delivery that failed before the producer took the record (sent again later)."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future


async def deliver(writer: RunWriter, record: EventRecord, topic: str) -> Delivery:
    """Send ``record`` to ``topic`` (the run's ``events`` or its boundaries' topic); a
    retriable refusal to even take it (the producer's buffer full while no leader drains
    it) is a failed delivery, any other is raised."""
    send = writer.send if topic == writer.topic else writer.send_boundary
    try:
        future = await send(record.event_type, record.seq, record.value)
    except KafkaError as exc:
        if not retriable(exc):
            raise
        future = failed(exc)
    return Delivery(future, record, topic)


class RecordsLostError(KafkaError):  # type: ignore[misc]
    """A record of a run was written after an earlier one of the same topic failed: the
    earlier one can no longer be written in its place, so the run ends (RUN_ERROR
    ``publish_failed``) rather than go on with a hole a live stream would skip."""

    retriable = False


def written_past_a_failure(pending: deque[Delivery]) -> RecordsLostError | None:
    """The loss when a delivery in ``pending`` was taken after an earlier one of its topic
    failed (a batch that expired while no leader was known, later ones written once one
    was), or None when every topic's failures are a suffix of its deliveries."""
    failed: dict[str, Delivery] = {}
    for d in pending:
        if failure(d.future) is not None:
            failed.setdefault(d.topic, d)
        elif d.topic in failed:
            first = failed[d.topic].record
            return RecordsLostError(
                f"{d.topic} took record #{d.record.seq} of the run after #{first.seq} failed "
                f"({type(failure(failed[d.topic].future)).__name__}): the records between "
                "can no longer be written in order")
    return None


async def settle(pending: deque[Delivery], writer: RunWriter) -> None:
    """Return once the broker has every delivery in ``pending`` (emptied), or the first
    one it has not failed for good (left at the head, the ones before it dropped);
    sends again from the first that failed retriably, as long as that takes.
    ``RecordsLostError`` when a later record was written past a failed one."""
    attempt, since, reported = 0, 0.0, 0.0
    while pending:
        await asyncio.wait([d.future for d in pending])
        first = next((i for i, d in enumerate(pending) if failure(d.future) is not None), None)
        if first is None:
            pending.clear()
            break
        for _ in range(first):
            pending.popleft()
        exc = failure(pending[0].future)
        assert exc is not None
        if not retriable(exc):
            return
        lost = written_past_a_failure(pending)
        if lost is not None:
            raise lost
        now = time.monotonic()
        if attempt == 0:
            since = reported = now
            log.warning("the broker did not take run %s's records (%d from the first that "
                        "failed; %s: %s); the run holds and sends them again until it does",
                        writer.run_id, len(pending), type(exc).__name__, exc)
        elif now - reported >= REPORT_EVERY_S:
            reported = now
            log.warning("run %s still holds %d records the broker has not taken after %.0f s "
                        "(attempt %d: %s)", writer.run_id, len(pending), now - since,
                        attempt + 1, type(exc).__name__)
        sequence_gaps.restart(writer.producer)
        await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
        attempt += 1
        await _send_again(pending, writer)
    if attempt:
        log.warning("the broker took run %s's held records after %.0f s (%d attempts); the "
                    "run goes on", writer.run_id, time.monotonic() - since, attempt + 1)


async def _send_again(pending: deque[Delivery], writer: RunWriter) -> None:
    """Send ``pending``'s failed records again, in order; those after one the producer
    would not even take stay failed (sent on the next attempt), so none overtakes it."""
    again = [d for d in pending if failure(d.future) is not None]
    pending.clear()
    for i, d in enumerate(again):
        sent = await deliver(writer, d.record, d.topic)
        pending.append(sent)
        if sent.future.done() and failure(sent.future) is not None:
            pending.extend(again[i + 1:])
            return
