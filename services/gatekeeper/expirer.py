"""The expiry policy's Kafka half: resumes for lapsed threads, sent to ``requests``.

With ``AGUI_ON_EXPIRY=cancel`` each gatekeeper instance runs one
``Expirer`` task over the threads of the partitions it owns. It learns
their committed states where the telemetry does (a restore, each installed
transaction, a release) and keeps a heap of the moments threads lapse
(``expiry_policy.Deadlines``): no task or timer per thread, and a thread
whose interrupts never expire costs nothing. When a thread lapses it
rebuilds the thread's accumulated messages and state from its events, as
``agui-relay resume`` does (``services.agui.transcript``, resent events
dropped by their run and sequence headers), builds the resume cancelling
every open interrupt (``expiry_policy.expiry_request``) and publishes it to
``requests``, keyed by its thread like any request. The threads that lapse
together are taken partition by partition: one read of the events partition
serves all of them (``expiry_history``; a read per thread made 10,000
threads of one deadline cost the square of their events), and their resumes
are all under way before any acknowledgement is awaited. The rebuild runs in a
worker thread, its state bounded by ``AGUI_MAX_RECORD_BYTES`` (a hostile
``STATE_DELTA`` had frozen the loop for 20 s per try); a resume that still
cannot fit a record is not sent, and not tried again until the thread's
state changes: an error log says so, and ``agui-relay stuck`` lists the
thread with its expired interrupts for an operator to cancel.

It decides nothing: the request is decided by the gatekeeper owning the
thread's partition, in its transaction, by ``rules`` — so a copy sent twice
(this instance killed after sending, its successor sending again) is one
request id answered once, and a client's resume admitted first makes it a
rejection. Sending is at least once; deciding is exactly once. A send that
fails is tried again a second later. The events of the interrupted run are
read from a minute before it was admitted (``ThreadState.run_started_at``,
allowing for clock skew between hosts); its ``RUN_STARTED`` echoes the
input it ran with, so nothing older is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from contracts import RunRequest, ThreadState, encode
from services.agui.jsdate import to_epoch_ms
from services.agui.transcript import Transcript, replay
from services.gatekeeper.expiry_history import Histories, decoded
from services.gatekeeper.expiry_policy import Deadlines, expiry_request
from services.kafka.clients import (
    AIOKafkaProducer,
    MessageSizeTooLargeError,
    TopicPartition,
    new_producer,
)
from services.kafka.reader import Start, TopicReader
from services.kafka.sizing import RecordLimit
from services.runtime.logging import run_fields
from services.runtime.settings import KafkaSettings

log = logging.getLogger(__name__)

SKEW = timedelta(seconds=60)
"""How far before a run's admission its events are looked for (clocks of other hosts)."""
RETRY_MS = 1000
LONGEST_SLEEP_S = 1.0
"""The loop looks at the heap at least this often (a clock that jumps is noticed)."""

Current = Callable[[int, str], ThreadState | None]


class Expirer:
    """One instance's expiry timer: lapsed threads' resumes onto ``requests``."""

    def __init__(self, kafka: KafkaSettings, client_id: str,
                 clock: Callable[[], datetime], current: Current) -> None:
        self.kafka = kafka
        self.client_id = f"{client_id}-expiry"
        self.clock = clock
        self.current = current
        """The committed state of a thread of an owned partition (None: not owned)."""
        self.deadlines = Deadlines()
        self.sent = 0
        self._wake = asyncio.Event()

    # ---- what the loop tells it (no I/O, never blocks the loop) -------------

    def restored(self, partition: int, states: Iterable[ThreadState]) -> None:
        self.deadlines.watch(partition, states)
        self._wake.set()

    def committed(self, partition: int, states: Iterable[ThreadState]) -> None:
        self.deadlines.watch(partition, states)
        self._wake.set()

    def released(self, partitions: Iterable[int]) -> None:
        self.deadlines.forget(partitions)

    # ---- the task ----------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Send the resumes of lapsed threads until ``stop`` is set (its clients are
        started again a second after they fail: the heap is kept)."""
        while not stop.is_set():
            try:
                await self._serve(stop)
            except Exception:
                log.exception("expiry timer failed; starting it again in 1 s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

    async def _serve(self, stop: asyncio.Event) -> None:
        producer = new_producer(self.kafka, self.client_id)
        await producer.start()
        try:
            async with TopicReader(self.kafka, f"{self.client_id}-history") as reader:
                while not stop.is_set():
                    now = self.clock()
                    lapsed: dict[int, list[ThreadState]] = {}
                    for partition, state in self.deadlines.due(to_epoch_ms(now), self.current):
                        lapsed.setdefault(partition, []).append(state)
                    for partition, states in lapsed.items():
                        await self._resume(producer, reader, partition, states, now)
                    await self._sleep(stop)
        finally:
            await producer.stop()

    async def _sleep(self, stop: asyncio.Event) -> None:
        nxt = self.deadlines.next_at()
        wait = LONGEST_SLEEP_S
        if nxt is not None:
            wait = min(wait, max(0.0, (nxt - to_epoch_ms(self.clock())) / 1000))
        self._wake.clear()
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    async def _resume(self, producer: AIOKafkaProducer, reader: TopicReader, partition: int,
                      states: list[ThreadState], now: datetime) -> None:
        """Send the resumes of ``partition``'s lapsed threads: one read of their events,
        every send under way before any acknowledgement is awaited."""
        try:
            histories = await self._histories(reader, partition, states)
        except Exception as exc:
            for state in states:
                self._not_sent(partition, state, now, exc)
            return
        sending: list[tuple[ThreadState, str, asyncio.Future[Any]]] = []
        for state in states:
            try:
                request = await self._request(histories.take(state.thread_id), state, now)
                value = encode(request)
                limit = RecordLimit(self.kafka.max_record_bytes)
                key = state.thread_id.encode()
                size = limit.excess(key, value)
                if size is not None:
                    raise MessageSizeTooLargeError(limit.why("the expiry resume", size))
                sending.append((state, request.request_id, await producer.send(
                    self.kafka.topics.requests, value, key=key, partition=partition)))
            except Exception as exc:
                self._not_sent(partition, state, now, exc)
        acks = await asyncio.gather(*(f for _, _, f in sending), return_exceptions=True)
        for (state, request_id, _), ack in zip(sending, acks, strict=True):
            if isinstance(ack, BaseException):
                self._not_sent(partition, state, now, ack)
                continue
            self.sent += 1
            log.info("every interrupt of run %s expired: sent %s cancelling %d",
                     state.interrupted_run_id, request_id, len(state.open_interrupts),
                     extra={**run_fields(state.thread_id, state.interrupted_run_id),
                            "requestId": request_id})

    def _not_sent(self, partition: int, state: ThreadState, now: datetime,
                  exc: BaseException) -> None:
        fields = run_fields(state.thread_id, state.interrupted_run_id)
        if isinstance(exc, MessageSizeTooLargeError):  # the same next time: not tried again
            log.error("expiry resume of thread %s cannot be sent: %s; its interrupts stay "
                      "expired until answered (agui-relay resume --cancel-expired)",
                      state.thread_id, exc, extra=fields)
            return
        log.warning("expiry resume of thread %s not sent (%s); trying again",
                    state.thread_id, exc, extra=fields)
        self.deadlines.retry(partition, state, to_epoch_ms(now) + RETRY_MS)

    async def _histories(self, reader: TopicReader, partition: int,
                         states: list[ThreadState]) -> Histories:
        """The lapsed threads' events, from one read of their (co-partitioned) events
        partition from the earliest of their starts to its end."""
        histories = Histories({
            state.thread_id: (to_epoch_ms(state.run_started_at - SKEW)
                              if state.run_started_at is not None else None)
            for state in states})
        since = histories.start_ms()
        tp = TopicPartition(self.kafka.topics.events, partition)
        ends = await reader.assign([tp], Start.at(since) if since is not None
                                   else Start.beginning())
        async for batch in reader.batches(until=ends):
            histories.add(batch)
        return histories

    async def _request(self, values: list[bytes], state: ThreadState,
                       now: datetime) -> RunRequest:
        """The resume of ``state``, with the RunAgentInput members its events add up to."""
        transcript = await asyncio.to_thread(_replayed, values, self.kafka.max_record_bytes)
        for warning in transcript.warnings:
            log.warning("history of thread %s: %s", state.thread_id, warning,
                        extra=run_fields(state.thread_id, state.interrupted_run_id))
        return expiry_request(state, transcript.input_fields(), now)


def _replayed(values: list[bytes], max_state_bytes: int) -> Transcript:
    return replay(decoded(values), max_state_bytes=max_state_bytes)
