"""The open-interrupt index: every interrupt waiting on a person, across threads.

The thread view holds each thread's latest ThreadState as raw bytes; the
inbox needs the other axis — every open interrupt of a tenant, newest
first, filtered by agent, reason or expiry — without decoding every state
per request. ``InterruptIndex.apply`` is fed each record the view applies
(its change hook) and keeps, per thread, the open interrupts of the latest
state as ``OpenEntry`` rows, and returns what changed (``Change``: opened,
answered — gone from the state, whether resolved, cancelled or the thread
deleted — or expired). ``listing`` answers ``GET /interrupts``; ``due``
pops the expiry heap for the feed's single timer (``inbox_feed``).

Order: an entry's ``opened_ms`` is the ``updatedAt`` of the first state
that showed it (the gatekeeper's clock at the run's end); the interrupts
one run raised together keep the order it raised them in. Expiry is read
with ``services.agui.expiry`` exactly as the gatekeeper decides it.
Ownership follows ``tenancy.may_read`` (an owned thread for its owner
only; an unowned one for everyone while authentication is off, for no
tenant when it is on). Pure: no I/O, the
clock is an argument. What a state does not hold is not here: the gated
tool call's arguments live on the events topic and are served per thread
by the history route (``interrupt_routes``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import orjson

from services.agui.expiry import read_expiry

ChangeKind = Literal["opened", "answered", "expired"]


@dataclass(frozen=True, slots=True)
class OpenEntry:
    """One open interrupt with where it waits."""

    thread_id: str
    run_id: str
    agent: str | None
    principal: str | None
    interrupt: dict[str, Any]
    """The AG-UI ``Interrupt`` in wire form, as the state holds it."""
    opened_ms: int
    order: int
    expires_ms: int | None

    @property
    def interrupt_id(self) -> str:
        return str(self.interrupt.get("id", ""))

    def expired(self, now_ms: int) -> bool:
        return self.expires_ms is not None and self.expires_ms <= now_ms

    def wire(self, now_ms: int) -> dict[str, Any]:
        """The ``GET /interrupts`` item (camelCase, optional members omitted)."""
        i = self.interrupt
        out: dict[str, Any] = {"id": self.interrupt_id, "threadId": self.thread_id,
                               "runId": self.run_id}
        if self.agent is not None:
            out["agent"] = self.agent
        for name in ("reason", "message", "toolCallId", "responseSchema", "expiresAt",
                     "metadata", "subagentRunId"):
            if i.get(name) is not None:
                out[name] = i[name]
        out["expired"] = self.expired(now_ms)
        out["openedAt"] = self.opened_ms
        return out


@dataclass(frozen=True, slots=True)
class Change:
    """What happened to one interrupt."""

    kind: ChangeKind
    entry: OpenEntry

    def wire(self, now_ms: int) -> dict[str, Any]:
        return {"type": self.kind, "interrupt": self.entry.wire(now_ms)}


@dataclass(frozen=True, slots=True)
class Filters:
    """``GET /interrupts``' query: each None means any."""

    agent: str | None = None
    reason: str | None = None
    expired: bool | None = None

    def admit(self, entry: OpenEntry, now_ms: int) -> bool:
        return ((self.agent is None or entry.agent == self.agent)
                and (self.reason is None or entry.interrupt.get("reason") == self.reason)
                and (self.expired is None or entry.expired(now_ms) == self.expired))


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing, newest first."""

    items: list[OpenEntry]
    total: int
    next_offset: int | None


def visible(owner: str | None, principal: str, *, enforced: bool) -> bool:
    """``tenancy.may_read`` on the owner alone (a unit test holds them equal)."""
    if owner is not None:
        return owner == principal
    return not enforced


def _ms(value: Any) -> int:
    if not isinstance(value, str):
        return 0
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        return 0


@dataclass
class InterruptIndex:
    """The open interrupts of every thread the view holds (see the module docstring)."""

    _threads: dict[str, tuple[OpenEntry, ...]] = field(default_factory=dict)
    _heap: list[tuple[int, int, str, str]] = field(default_factory=list)
    """(expires_ms, order, threadId, interruptId) of entries with an expiry."""
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def __len__(self) -> int:
        return sum(len(v) for v in self._threads.values())

    def apply(self, thread_id: str, value: bytes | None) -> list[Change]:
        """Take the thread's new state (None: deleted); what opened and what was answered."""
        before = {e.interrupt_id: e for e in self._threads.get(thread_id, ())}
        after = self._entries(thread_id, value, before)
        if after:
            self._threads[thread_id] = after
        else:
            self._threads.pop(thread_id, None)
        now_ids = {e.interrupt_id for e in after}
        changes = [Change("answered", e) for i, e in before.items() if i not in now_ids]
        for entry in after:
            if entry.interrupt_id not in before:
                changes.append(Change("opened", entry))
                if entry.expires_ms is not None:
                    heapq.heappush(self._heap, (entry.expires_ms, entry.order, thread_id,
                                                entry.interrupt_id))
        return changes

    def _entries(self, thread_id: str, value: bytes | None,
                 before: dict[str, OpenEntry]) -> tuple[OpenEntry, ...]:
        if value is None:
            return ()
        try:
            state = orjson.loads(value)
        except orjson.JSONDecodeError:
            return ()
        opened = state.get("openInterrupts") if isinstance(state, dict) else None
        if not isinstance(opened, list) or not opened:
            return ()
        agent, principal = state.get("agent"), state.get("principal")
        updated = _ms(state.get("updatedAt"))
        out = []
        for item in opened:
            interrupt = item.get("interrupt") if isinstance(item, dict) else None
            if not isinstance(interrupt, dict) or not isinstance(interrupt.get("id"), str):
                continue
            known = before.get(interrupt["id"])
            expires = interrupt.get("expiresAt")
            out.append(OpenEntry(
                thread_id=thread_id, run_id=str(item.get("runId", "")),
                agent=agent if isinstance(agent, str) else None,
                principal=principal if isinstance(principal, str) else None,
                interrupt=interrupt,
                opened_ms=known.opened_ms if known else updated,
                order=known.order if known else next(self._order),
                expires_ms=read_expiry(expires if isinstance(expires, str) else None).epoch_ms))
        return tuple(out)

    def next_expiry_ms(self) -> int | None:
        """When the earliest pending expiry falls (possibly of an entry since answered)."""
        return self._heap[0][0] if self._heap else None

    def due(self, now_ms: int) -> list[Change]:
        """Pop every expiry at or before ``now_ms`` whose interrupt is still open."""
        out = []
        while self._heap and self._heap[0][0] <= now_ms:
            _, order, thread_id, interrupt_id = heapq.heappop(self._heap)
            for entry in self._threads.get(thread_id, ()):
                if entry.interrupt_id == interrupt_id and entry.order == order:
                    out.append(Change("expired", entry))
        return out

    def entries(self) -> Iterable[OpenEntry]:
        for entries in self._threads.values():
            yield from entries

    def listing(self, principal: str, *, enforced: bool, filters: Filters, now_ms: int,
                offset: int, limit: int) -> Page:
        """The caller's open interrupts matching ``filters``, newest first, one page."""
        mine = [e for e in self.entries()
                if visible(e.principal, principal, enforced=enforced)
                and filters.admit(e, now_ms)]
        mine.sort(key=lambda e: (-e.opened_ms, e.order))
        end = offset + limit
        return Page(mine[offset:end], len(mine), end if end < len(mine) else None)
