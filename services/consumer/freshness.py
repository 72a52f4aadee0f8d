"""Read-your-writes: ``GET /threads/{id}`` never answers a state from before a run's end
that a client has already read on a stream of this service.

The gatekeeper commits a thread's new state after it reads the run's
terminal event, so a client that saw ``RUN_FINISHED`` and asks for the thread
at once would otherwise read ``running`` for tens of milliseconds, on this
instance or another. ``settled`` closes that gap where the view shows the
thread running run R, the only state a terminal event changes:

1. one ListOffsets for the thread's ``events`` partition, and a wait until
   this instance's fan-out has read up to that end (an end the client read
   anywhere is committed, so it is below it);
2. if the fan-out read R's terminal event, a wait until the thread view
   shows a state past R (``catchup.passed``): the gatekeeper's own;
3. if that does not come within the bound, the answer is the state the end
   produces, computed with the gatekeeper's pure rules (``catchup.closed``).
   A ``RUN_FINISHED`` the gatekeeper cannot read (it dead-letters it, the
   thread stays running) is not waited for.

Every wait shares one bound, ``AGUI_READ_YOUR_WRITES_S`` (0 turns this off).
An idle or interrupted thread costs no Kafka call: its state moves on only
by an admission, which the gatekeeper writes with the decision, before any
event of the run. One lag of the view is still checked, from memory: when
this instance saw a run of the thread admitted and ended that the view does
not know yet (its first run, or one whose admission the view has not read),
the route waits, within the bound, for the view to show it.

Across instances: ``GET /threads/{id}`` is answered by the instance owning
the thread's partition (``forward``), the one that reads its events, so a
run end a client read through any instance is one this instance has read
or reads in step 1; a partition new to it is read from a few seconds before
its end (``handover``), so an end read through the old owner just before a
rebalance is known here too. With
authentication on, a thread the view does not know at all is still the 404
(``tenancy``: its owner cannot be established), waited for by nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from contracts import ThreadState
from contracts.limits import InputLimits
from services.consumer.catchup import boundary, closed, passed
from services.consumer.streams import FanOut
from services.consumer.threads import ThreadView
from services.kafka.clients import KafkaError


class Freshness:
    """Waits, bounded, until a thread's state is past every run end a client could have read."""

    def __init__(self, threads: ThreadView, fanout: FanOut, limits: InputLimits,
                 within_s: float) -> None:
        self.threads = threads
        self.fanout = fanout
        self.limits = limits
        self.within_s = within_s

    async def settled(self, thread_id: str, state: ThreadState | None) -> ThreadState | None:
        """``state`` (the view's) or the newer one every end already readable produced."""
        if self.within_s <= 0:
            return state
        deadline = asyncio.get_running_loop().time() + self.within_s
        if state is not None and state.status == "running" and state.run_id is not None:
            return await self._running(thread_id, state, state.run_id, deadline)
        last = self.fanout.last_ended.get(thread_id)
        if last is None or passed(state, last) or (thread_id, last) not in self.fanout.admitted:
            return state
        return await self._past(thread_id, last, deadline) or self.threads.get(thread_id) or state

    async def _running(self, thread_id: str, state: ThreadState, run_id: str,
                       deadline: float) -> ThreadState:
        # The broker away or slow: answer from what this instance has read.
        with contextlib.suppress(KafkaError, TimeoutError):
            async with asyncio.timeout_at(deadline):
                await self.fanout.reach_end(thread_id, deadline)
        ending = self.fanout.ended.get((thread_id, run_id))
        latest = self.threads.get(thread_id) or state
        if ending is None or passed(latest, run_id):
            return latest
        if ending.value is not None and boundary(ending, self.limits) is None:
            return latest  # an end the gatekeeper cannot read either: the run stays running
        found = await self._past(thread_id, run_id, deadline)
        if found is not None:
            return found
        latest = self.threads.get(thread_id) or state
        if passed(latest, run_id):
            return latest
        return closed(latest, ending, datetime.now(UTC), self.limits) or latest

    async def _past(self, thread_id: str, run_id: str, deadline: float) -> ThreadState | None:
        """The view's state once it is past ``run_id``'s end; None at the deadline."""
        while True:
            state = self.threads.get(thread_id)
            if passed(state, run_id):
                return state
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            await self.threads.progress.next(left)
