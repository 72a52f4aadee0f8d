"""The gatekeeper's commit procedure: decided batches to one transaction, and a failed one settled.

The routing loop (``processor``) files polled records with their partitions;
this module turns each partition's records into a ``Batch``, commits every
ready batch in one transaction, installs its outcome, and, when the
transaction fails, learns from Kafka what it did (``settle``) before
anything is decided again. The order below is the exactly-once argument;
it is written down here only.

Commit procedure, for each owned partition p, in every round:

1. Poll once and file the records with their partition; drop those below
   p's read position (a re-fetch). If the assignment changed, or p was
   rewound, while the records were in flight, drop them and seek back to
   the read position (``processor``).
2. Apply the run boundaries of ``runs`` p to a ``Batch`` over p's committed
   thread states (in memory; ``runs`` carries nothing else, and any other
   event type would be skipped on its header).
3. When a new request is for a thread that is running, hold ``requests`` p
   until ``runs`` p has been read up to the last stable offset it had when
   they were fetched (one ListOffsets for all such partitions, ``processor``),
   or ``events_wait_ms`` (plus ``batch_ms``) passed: a resume sent after its interrupt was
   published never meets the thread still running.
4. Decide the held requests in offset order (pure ``rules``).
5. p's batch joins the next transaction: decisions → ``decisions``,
   dispatches → ``dispatch.<agent>``, dead letters → ``deadletter``, the
   new thread states → ``threads`` partition p, and the next offsets of
   ``requests`` p and ``runs`` p, with those of every other partition
   whose batch is ready, in ONE ``send_offsets_to_transaction``; commit. It
   runs in the background: polling goes on, and p's new records wait in
   ``Owned`` until the transaction carrying p's batch has ended; batches
   that become ready meanwhile ride the next one, which begins no sooner
   than ``AGUI_GATEKEEPER_TRANSACTION_INTERVAL_MS`` (or ``_BATCH_MS``) after the last began
   (``pacing``; batches are then built when it may begin, so they carry
   whatever arrived until then).
6. Only after the commit returns: each batch's thread states replace its
   partition's committed states and the committed offsets move. With
   ``AGUI_STATE_DIR`` the states go to p's store with the offset after
   their ``threads`` records, in one write batch (``threadstore``): killed
   before that write, the store is behind its changelog and catches up on
   the next assignment; it never holds what Kafka did not commit. If step 5
   fails, or has not ended within ``transaction_deadline_s`` (a request the
   broker never answers), the transaction is aborted (if it still can be)
   and the producer replaced, which settles it; the group's committed offsets then tell
   whether it committed after all (``settle``): if so it is installed as in
   a success; if not, each partition it carried is sought back to its
   committed offsets and the held requests dropped: the same records are
   decided again (except the inputs of records the broker refused for their
   size, which are dead-lettered instead: ``refusals``). Offsets refused
   for a stale generation, or a producer fenced by a successor that took
   its id, need no asking: the successor
   decides from what Kafka holds, so the partitions are rewound and the
   instance decides nothing more until the group has assigned it partitions
   again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from services.gatekeeper import pacing
from services.gatekeeper.batch import Batch
from services.gatekeeper.left_open import LeftOpen
from services.gatekeeper.partition import Owned, outputs, start_producer
from services.gatekeeper.refusals import set_aside
from services.gatekeeper.settle import settle
from services.gatekeeper.state import Instance, Share, done
from services.kafka.clients import TopicPartition
from services.kafka.fencing import (
    InstanceFencedError,
    StaleGenerationError,
    is_member,
    request_rejoin,
)
from services.kafka.partitioning import hashed_among
from services.kafka.transactions import (
    RecordsRefusedError,
    TransactionStalledError,
    commit_outputs,
    is_fenced,
    stop_producer,
)
from services.runtime.logging import run_fields

log = logging.getLogger(__name__)


def launch(st: Instance) -> None:
    """Steps 2, 4, 5 for every partition with work and no batch in flight."""
    if st.group is None:  # refused by the group: wait for the next assignment
        return
    if _paced(st):
        return
    for owned in st.owned.values():
        prepare(st, owned)
    start_transaction(st)


def _paced(st: Instance) -> bool:
    """True while the next transaction may not begin yet (``pacing``): a timer launches
    the batches then, so what arrives meanwhile joins them."""
    wait = pacing.wait_s(st.transaction_began, time.monotonic(), st.settings.pacing_s)
    if wait <= 0:
        return False
    if st.pacer is None:
        st.pacer = asyncio.get_running_loop().call_later(wait, _paced_out, st)
    return True


def _paced_out(st: Instance) -> None:
    """The interval has passed: launch what is ready, as a commit ending would. Left to the
    routing loop while it holds the lock (it launches after routing), or to a rebalance."""
    st.pacer = None
    if st.accepting and st.transaction is None and not st.lock.locked():
        launch(st)


def prepare(st: Instance, owned: Owned) -> None:
    """Apply p's inbox, decide its held requests if ``runs`` caught up, queue the batch."""
    if owned.inflight is not None or not (owned.inbox or owned.held or owned.advanced()):
        return
    if _lingering(st, owned):
        return
    owned.waiting_since = None
    st.limits = limits = st.limits.with_agents(st.agents.names).with_partitions(_among(st))
    batch = Batch(owned.states, st.clock(), st.settings.policy, limits,
                  poison=owned.poison, entropy=st.entropy)
    for record in owned.inbox:
        batch.event(record)
    owned.inbox, owned.applied_event = [], owned.next_event
    polled_at = None
    if owned.held and _caught_up(st, owned):
        for record in owned.held:
            batch.request(record)
        polled_at = owned.held_since
        owned.held, owned.barrier, owned.held_since = [], None, None
    if batch.has_output or (owned.advanced() and _flush_due(st, owned)):
        owned.inflight = asyncio.get_running_loop().create_future()
        share = Share(owned, batch if batch.has_output else None, owned.offsets(), polled_at)
        st.shares.append(share)


def _among(st: Instance) -> int | None:
    """How many partitions a thread is hashed among on ``requests`` (AGUI_PARTITIONS, or
    fewer when the topic has fewer), from the consumer's metadata; None before it has any."""
    count = len(st.consumer.partitions_for_topic(st.kafka.topics.requests) or ()) \
        if st.consumer is not None else 0
    return hashed_among(st.kafka.partitions, count) if count else None


def start_transaction(st: Instance) -> None:
    """Step 5: commit every queued batch in one transaction, unless one is in flight."""
    if st.transaction is not None or not st.shares:
        return
    shares, st.shares = st.shares, []
    if st.fatal is not None or st.group is None:  # nothing more is written
        for share in shares:
            share.owned.rewound()
            done(share.owned)
            if st.fatal is None:
                st.seek(share.owned)
        return
    st.transaction_began = time.monotonic()
    st.transaction = asyncio.create_task(commit(st, shares))


async def drain(st: Instance) -> None:
    """Commit what is queued and wait for every transaction in flight to end."""
    while st.transaction is not None or st.shares:
        start_transaction(st)
        if st.transaction is not None:
            await asyncio.gather(st.transaction, return_exceptions=True)


def _lingering(st: Instance, owned: Owned) -> bool:
    """True while a small backlog may still grow into a bigger, cheaper transaction."""
    if owned.waiting_since is None or st.settings.linger_ms == 0:
        return False
    if len(owned.inbox) + len(owned.held) >= st.settings.max_batch:
        return False
    return (time.monotonic() - owned.waiting_since) * 1000 < st.settings.linger_ms


def _caught_up(st: Instance, owned: Owned) -> bool:
    if owned.barrier is None or owned.applied_event >= owned.barrier:
        return True
    waited_ms = (time.monotonic() - (owned.held_since or 0.0)) * 1000
    if waited_ms >= st.settings.catch_up_ms:
        st.stats["events_wait_expired"] += 1
        log.warning(
            "deciding requests before runs p%d caught up (%d < %d)",
            owned.partition,
            owned.applied_event,
            owned.barrier,
        )
        return True
    return False


def _flush_due(st: Instance, owned: Owned) -> bool:
    return time.monotonic() - owned.last_commit >= st.settings.offsets_flush_s


async def commit(st: Instance, shares: list[Share]) -> None:
    """Steps 5 and 6 for the queued batches of every partition, as one transaction."""
    try:
        records = [
            record
            for share in shares
            if share.batch is not None
            for record in outputs(st.kafka.topics, share.owned.partition, share.batch)
        ]
        offsets = {tp: o for share in shares for tp, o in share.offsets.items()}
        committed = shares
        written: dict[TopicPartition, int] = {}
        try:
            written = await commit_outputs(st.require_producer(), records, offsets, st.fence(),
                                 deadline_s=st.settings.transaction_deadline_s)
        except Exception as exc:
            if isinstance(exc, StaleGenerationError) or is_fenced(exc):
                committed = _lost(st, shares, exc)
            elif not is_member(st.require_consumer(), st.fence()):
                # the group moved on meanwhile: a new producer under this id could
                # fence a successor that owns the same partitions now
                committed = _lost(st, shares, exc)
            else:
                stalled = isinstance(exc, TransactionStalledError)  # no trace to show
                log.error("transaction on partitions %s failed (%s); settling it",
                          [s.owned.partition for s in shares], exc, exc_info=not stalled)
                st.stats["transactions_failed"] += 1
                st.stats["transactions_stalled"] += stalled
                committed = await _recover(st, shares)
                if isinstance(exc, RecordsRefusedError):  # dead-lettered when read again
                    log.error("inputs set aside: %s", set_aside(exc.records, st.owned))
        now = time.monotonic()
        for share in committed:
            share.owned.committed(share.offsets, share.batch, written.get(
                TopicPartition(st.kafka.topics.threads, share.owned.partition)))
            share.owned.last_commit = now
            st.telemetry.committed(share.owned.partition, share.batch, share.polled_at)
            if st.expirer is not None and share.batch is not None:
                st.expirer.committed(share.owned.partition, share.batch.states.values())
            following = st.following.get(share.owned.partition)
            if following is not None and share.batch is not None:
                following.update(share.batch.states)  # newer than what ``follow`` reads
            if share.batch is not None:
                _count(st, share.batch)
        st.heap.settle()
        st.stats["transactions"] += 1
    except Exception as exc:  # a share may be half installed: memory is not Kafka's
        log.exception("installing a transaction's outcome failed; stopping")
        st.fatal = exc
    finally:
        for share in shares:
            done(share.owned)
        st.transaction = None
    if st.accepting and st.group is not None and not _paced(st):
        for owned in st.owned.values():
            prepare(st, owned)  # what arrived meanwhile, without waiting for a poll
    start_transaction(st)


def _count(st: Instance, batch: Batch) -> None:
    for d in batch.decisions:
        st.stats[d.verdict] += 1
        log.debug(
            "%s %s: %s",
            d.verdict,
            d.code or "",
            d.message,
            extra=run_fields(d.thread_id, d.run_id, d.request_id),
        )
    st.stats["decisions"] += len(batch.decisions)
    st.stats["dead_letters"] += len(batch.dead_letters)
    for thread_id, run_id, (topic, partition, offset) in batch.adopted:
        log.warning(
            "run %s started on idle thread %s without an admission (%s p%d@%d): the thread "
            "counts as running until that run ends on %s",
            run_id, thread_id, topic, partition, offset, topic,
            extra=run_fields(thread_id, run_id, None),
        )
    for letter in batch.dead_letters:
        log.warning(
            "dead letter from %s p%d@%d: %s",
            letter.source_topic,
            letter.partition,
            letter.offset,
            letter.reason,
            extra={"code": letter.code},
        )


def _lost(st: Instance, shares: list[Share], exc: Exception) -> list[Share]:
    """Another instance owns these partitions now: stop deciding until the group says.

    Either the group refused the offsets (this member's generation is
    over; the transaction aborted) or a newer producer took the
    transactional id (a successor with the same assignment; its
    ``init_transactions`` aborted or completed the transaction). Either
    way the successor decides from what Kafka holds, so every partition
    is rewound without asking Kafka, nothing more is decided, and the
    consumer rejoins; the next assignment restores everything. The
    producer is not replaced: that would fence the successor.
    """
    if isinstance(exc, InstanceFencedError):  # not a rebalance: two processes, one identity
        log.error("%s; stopping", exc)
        st.fatal = exc
    fenced = is_fenced(exc)
    log.warning("%s; rejoining the group", "the transactional id was taken over" if fenced
                else exc)
    st.stats["transactions_fenced" if fenced else "transactions_refused"] += 1
    st.group = None
    for share in shares:
        share.owned.rewound()
        st.seek(share.owned)
    request_rejoin(st.require_consumer())
    return []


async def _recover(st: Instance, shares: list[Share]) -> list[Share]:
    """Step 6 on failure: learn from Kafka what the transaction did (``settle``).

    Returns the shares it committed after all (the caller installs them);
    every other partition is back at what Kafka holds, and its records are
    read again from there.
    """
    hanging = await LeftOpen.of(st, sorted(st.owned))  # before the new producer changes it
    await _replace_producer(st)
    committed = []
    for share in shares:
        owned = share.owned
        settled = await settle(
            owned, share.offsets, st.kafka, st.require_consumer(), st.client_id, hanging
        )
        log.warning("the failed transaction on partition %d: %s", owned.partition,
                    settled.outcome)
        st.stats[f"transactions_{settled.outcome}"] += 1
        if settled.outcome == "committed":
            committed.append(share)
            continue
        if settled.states is not None:
            owned.states = settled.states
            owned.committed_request, owned.committed_event = settled.offsets
            st.telemetry.restored(owned.partition, settled.states.watched())
        owned.rewound()
        st.seek(owned)
    return committed


async def _replace_producer(st: Instance) -> None:
    """A new producer with the same id: its ``init_transactions`` settles the failed one."""
    old, st.producer = st.producer, None
    if old is not None:
        await stop_producer(old)  # a stuck or dead producer may never stop by itself
    st.producer = await start_producer(st.kafka, st.client_id, sorted(st.owned), retry=True)
