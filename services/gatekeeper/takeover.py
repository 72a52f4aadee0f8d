"""Partitions taken over on assignment and handed back on revocation, before anything is decided.

On assignment, before any decision, in a task of its own (aiokafka sends no
heartbeat while its rebalance callback runs, and this can outlast the
session): start the producer named by the new partitions (its
``init_transactions`` fences a predecessor and aborts what it left open),
read the group's committed offsets once stable (a transaction of a previous
owner still holding some has ended), restore each partition's thread states
from ``threads`` (``store.restore``). On revocation: wait for the takeover,
the round and the transactions in flight (``commit.drain``), commit any
offsets read past, stop the producer, forget every partition. Every step
holds the instance's lock, so no round routes records meanwhile, and moves
the generation, so a round polled across it is dropped and read again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from contracts import ThreadState
from services.gatekeeper.commit import drain
from services.gatekeeper.left_open import LeftOpen
from services.gatekeeper.partition import Owned, start_producer
from services.gatekeeper.settle import committed_offsets
from services.gatekeeper.state import Instance
from services.gatekeeper.store import summary, take_over
from services.kafka.clients import TopicPartition
from services.kafka.fencing import FencedGroup, fenced_group
from services.kafka.transactions import commit_outputs, stop_producer

log = logging.getLogger(__name__)

FOLLOW_CHUNK = 256
"""Watched threads decoded between two yields to the loop (a few ms of work)."""
FOLLOW_AFTER_S = 1.0
"""How long after a takeover its census starts (``follow``)."""


def assign(st: Instance, assigned: set[TopicPartition]) -> None:
    """On assignment: start taking the partitions over, in the background.

    aiokafka sends no heartbeat while a rebalance callback runs, and a
    takeover can outlast the session: the group's offsets become stable
    only once a transaction the last owner left open has ended (up to the
    transaction timeout, when the successor's transactional id does not
    fence it). Done inside the callback, that wait would cost the
    membership and hand the partitions round again. The member's
    generation is taken now, while it is the one that was assigned them.
    """
    try:
        group: FencedGroup | Exception = fenced_group(st.require_consumer())
    except Exception as exc:  # not a member any more: the next assignment comes soon
        group = exc
    previous = st.takeover
    st.takeover = asyncio.create_task(_take_over(st, previous, assigned, group))


async def settle_takeover(st: Instance) -> None:
    """Wait until a takeover in progress has ended (before giving partitions back)."""
    while (task := st.takeover) is not None:
        await asyncio.gather(task, return_exceptions=True)
        if st.takeover is task:  # not followed by another assignment meanwhile
            st.takeover = None


async def _take_over(
    st: Instance,
    previous: asyncio.Task[None] | None,
    assigned: set[TopicPartition],
    group: FencedGroup | Exception,
) -> None:
    if previous is not None:
        await asyncio.gather(previous, return_exceptions=True)
    await acquire(st, assigned, group)
    st.follower = asyncio.create_task(
        follow(st, sorted({tp.partition for tp in assigned}), after_s=FOLLOW_AFTER_S),
        name="census")


async def acquire(st: Instance, assigned: set[TopicPartition],
                  group: FencedGroup | Exception) -> None:
    """Fence, restore, position, before anything is decided (``assign``'s task).

    The loop may poll the new assignment while this runs (it is not
    blocked by the lock until it has records), so positions come from the
    group's committed offsets, not from the consumer, and the generation
    moves again at the end: that poll is dropped and read again.
    """
    async with st.lock:
        st.joined = True
        st.generation += 1
        st.accepting = False
        await drain(st)
        await release(st)  # normally empty: revocation came first
        st.accepting = True  # nothing is in flight: the new partitions start idle
        numbers = sorted({tp.partition for tp in assigned})
        if not numbers:
            return
        if isinstance(group, Exception):
            log.warning("assigned partitions %s but %s; waiting for the next assignment",
                        numbers, group)
            st.group = None
            return
        started = time.monotonic()
        try:
            st.group = group
            await _restore(st, numbers)
        except Exception as exc:
            st.fatal = exc
            log.exception("could not take over partitions %s", numbers)
            return
        finally:
            st.generation += 1
        st.read_again(st.owned.values())
        if st.threads is None:
            st.heap.freeze()  # the restored states stay: keep them out of every pass
        st.stats["takeovers"] += 1
        log.info(
            "assigned partitions %s: %s in %.0f ms",
            numbers,
            summary(st.owned[p].states for p in numbers),
            (time.monotonic() - started) * 1000,
        )
        st.assigned.set()


async def _restore(st: Instance, numbers: list[int]) -> None:
    """The producer for ``numbers`` (fencing), their committed offsets and thread states."""
    topics = st.kafka.topics
    began = time.monotonic()
    hanging = await LeftOpen.of(st, numbers)  # before the new producer changes it
    st.producer = await start_producer(st.kafka, st.client_id, numbers)
    fenced = time.monotonic()
    positions = [
        (TopicPartition(topics.requests, p), TopicPartition(topics.runs, p)) for p in numbers
    ]
    committed = await committed_offsets(
        st.require_consumer(), [tp for pair in positions for tp in pair], hanging.close_all
    )
    positioned = time.monotonic()
    restored = await take_over(st.kafka, st.threads, numbers, f"{st.client_id}-restore",
                               hanging.close)
    read = time.monotonic()
    for p, (requests, events) in zip(numbers, positions, strict=True):
        st.owned[p] = Owned(
            p,
            requests,
            events,
            restored[p],
            committed[requests],
            committed[events],
            last_commit=time.monotonic(),
        )
        st.following[p] = set()  # its census and expiry come after (``follow``)
    log.info("takeover of partitions %s: producer %.0f ms, committed offsets %.0f ms, thread "
             "states %.0f ms", numbers, (fenced - began) * 1000,
             (positioned - fenced) * 1000, (read - positioned) * 1000)


async def follow(st: Instance, numbers: list[int], after_s: float = 0.0) -> None:
    """After a takeover, outside its lock: hand each partition's watched threads (not
    idle) to the census and the expiry timer, yielding to the loop as they decode.

    Decoding them (tens of thousands of interrupted threads, read from the
    stores' marks) took as long as the rest of a takeover, and neither the
    gauges nor an expiry need them before the first decision: decisions go
    on meanwhile. A thread committed since the takeover is already counted
    with its newer state (``st.following`` names it), so what was read of it
    is left out; a partition handed back meanwhile is left alone. It starts
    ``after_s`` after the takeover: the requests that waited while the
    partitions had no owner are decided first, without sharing the loop.
    """
    sets = {p: st.following.get(p) for p in numbers}
    try:
        await asyncio.sleep(after_s)
        await _follow(st, numbers)
    except Exception:
        log.exception("census of partitions %s failed: the gauges and the expiry timer miss "
                      "their threads until each is committed again", numbers)
        for p, committed in sets.items():  # nobody reads them now: they grew with every
            if committed is not None and st.following.get(p) is committed:  # commit
                del st.following[p]


async def _follow(st: Instance, numbers: list[int]) -> None:
    began, count = time.monotonic(), 0
    for p in numbers:
        owned = st.owned.get(p)
        if owned is None or p not in st.following:
            continue
        found: dict[str, ThreadState] = {}
        for n, (thread_id, state) in enumerate(owned.states.watched_lazily(), 1):
            found[thread_id] = state
            if n % FOLLOW_CHUNK == 0:
                await asyncio.sleep(0)
                if st.owned.get(p) is not owned:
                    break
        if st.owned.get(p) is not owned:
            continue
        for thread_id in st.following.pop(p):
            found.pop(thread_id, None)
        st.telemetry.included(p, found)
        if st.expirer is not None:
            st.expirer.restored(p, found.values())
        count += len(found)
    if numbers:
        log.info("census of partitions %s: %d threads not idle, in %.0f ms", numbers, count,
                 (time.monotonic() - began) * 1000)
    if st.threads is not None:  # states on disk: what the restore and the census read is
        st.heap.collect()  # garbage, some of it cyclic; collected after the first decisions


async def revoke(st: Instance) -> None:
    """On revocation: the takeover and the round in flight finish first, then hand back."""
    await settle_takeover(st)
    async with st.lock:
        st.generation += 1
        st.accepting = False
        await drain(st)
        await release(st)


async def release(st: Instance) -> None:
    """Commit offsets read past (when possible), stop the producer, forget all."""
    owned_all, st.owned = list(st.owned.values()), {}
    producer, st.producer = st.producer, None
    st.telemetry.released([o.partition for o in owned_all])
    if st.expirer is not None:
        st.expirer.released(o.partition for o in owned_all)
    if st.follower is not None:
        st.follower.cancel()  # its partitions are handed back: nothing left to follow
        st.follower = None
    for o in owned_all:
        st.following.pop(o.partition, None)
    advanced = {tp: n for o in owned_all if o.advanced() for tp, n in o.offsets().items()}
    if producer is not None and advanced and st.fatal is None and st.group is not None:
        try:
            await commit_outputs(producer, [], advanced, st.fence(),
                                 deadline_s=st.settings.transaction_deadline_s)
        except Exception:
            log.warning("could not commit offsets read past on release", exc_info=True)
    if producer is not None:
        await stop_producer(producer)
    if st.threads is not None:  # closed; deleted unless owned again within the grace
        st.threads.release([o.partition for o in owned_all])
    if owned_all:
        log.info("released partitions %s", [o.partition for o in owned_all])
