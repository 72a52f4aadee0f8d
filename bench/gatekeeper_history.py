"""The gatekeeper benchmark's history phase: what a thread's past costs a decision.

The pure ``decide()`` on a thread with 10, 100, 1,000 and 10,000 earlier
runs (a full resume of three interrupts), no Kafka involved: what a thread
remembers is bounded (16 runs, 32 decisions), so from the point where those
bounds fill up (about 16 runs) the cost stays flat.
"""

from __future__ import annotations

import functools
import timeit
from datetime import UTC, datetime

from ag_ui.core import Interrupt, ResumeEntry, RunFinishedInterruptOutcome

from bench.gatekeeper_requests import AGENT, request
from contracts import ThreadState, encode
from services.gatekeeper.rules import Policy, decide, on_boundary
from services.gatekeeper.thread import Boundary, fresh

HISTORIES = (10, 100, 1_000, 10_000)


def history_cost(histories: tuple[int, ...] = HISTORIES) -> dict[str, float]:
    """µs per decide() of a full resume, on threads with different histories.

    The timings are interleaved (every history once per pass, best of the
    passes) so that other work on the machine hits them all alike.
    """
    now = datetime.now(UTC)
    policy = Policy()
    resume = [
        ResumeEntry(interrupt_id=i, status="resolved", payload={"ok": True})
        for i in ("a", "b", "c")
    ]
    probe = request("t", "probe", resume)
    timers: dict[int, timeit.Timer] = {}
    out: dict[str, float] = {}
    for runs in histories:
        state = fresh("t")
        for n in range(runs):
            state = decide(state, request("t", f"r{n}"), now, policy).state
            state, _ = on_boundary(state, Boundary("RUN_FINISHED", f"r{n}", AGENT), now, policy)
        state = _interrupted(state, now, policy)
        assert decide(state, probe, now, policy).decision.verdict == "admitted"
        timers[runs] = timeit.Timer(functools.partial(decide, state, probe, now, policy))
        out[f"{runs}_runs_state_bytes"] = len(encode(state))
    best = dict.fromkeys(histories, float("inf"))
    for _ in range(7):
        for runs, timer in timers.items():
            best[runs] = min(best[runs], timer.timeit(2000) / 2000)
    for runs in histories:
        out[f"{runs}_runs_us"] = best[runs] * 1e6
    return out


def _interrupted(state: ThreadState, now: datetime, policy: Policy) -> ThreadState:
    state = decide(state, request("t", "ask"), now, policy).state
    interrupts = [
        Interrupt(id=i, reason="approve", expires_at="2999-01-01T00:00:00Z")
        for i in ("a", "b", "c")
    ]
    outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
    state, _ = on_boundary(state, Boundary("RUN_FINISHED", "ask", AGENT, outcome), now, policy)
    return state
