"""Side effects performed at most once per thread and key, whatever crashes.

An agent that acts on an answer (deletes the files it was allowed to) wraps
the action in ``ctx.effect(key, action)``; the key is normally the
interrupt id that approved it. The runtime then

1. asks the ledger to *begin* the key: if the thread's ledger already holds
   it (started or done), the action is not run again and the earlier record
   comes back (``already_performed``, or ``outcome_unknown`` when a worker
   died between starting and finishing it);
2. otherwise the ledger durably records ``started`` before anything happens,
3. the action runs, shielded from the run's cancellation,
4. and the ledger records ``done`` with its result.

So an action runs at most once per (threadId, key): a crash after step 2
leaves ``started`` behind, which forbids a second attempt rather than risk
repeating it. The worker's ledger is the thread's record in the compacted
checkpoints topic; ``MemoryLedger`` serves tests and local runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

EffectStatus = Literal["performed", "already_performed", "outcome_unknown"]


@dataclass(frozen=True, slots=True)
class Effect:
    """What became of one ``ctx.effect`` call."""

    status: EffectStatus
    result: Any = None
    """The action's (JSON) result: this call's, or the one recorded earlier."""

    @property
    def performed_now(self) -> bool:
        """True when this call ran the action."""
        return self.status == "performed"


class EffectLedger(Protocol):
    """Durable record of side effects, per thread."""

    async def begin(self, thread_id: str, key: str, run_id: str) -> Effect | None:
        """Record ``key`` as started and return None, or return what was recorded before."""

    async def complete(self, thread_id: str, key: str, result: Any) -> None:
        """Record ``key`` as done with ``result``."""


class MemoryLedger:
    """An in-process ledger (tests, single-process tools)."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], tuple[str, Any]] = {}

    async def begin(self, thread_id: str, key: str, run_id: str) -> Effect | None:
        known = self.records.get((thread_id, key))
        if known is not None:
            status, result = known
            return Effect("already_performed" if status == "done" else "outcome_unknown", result)
        self.records[(thread_id, key)] = ("started", None)
        return None

    async def complete(self, thread_id: str, key: str, result: Any) -> None:
        self.records[(thread_id, key)] = ("done", result)
