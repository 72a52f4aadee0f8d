"""The open-interrupt index: every interrupt waiting on a person, across threads.

The thread view holds each thread's latest ThreadState as raw bytes; the
inbox needs the other axis — every open interrupt of a tenant, newest
first, filtered by agent, reason or expiry — without decoding every state
per request. ``InterruptIndex.apply`` is fed each record the view applies
(its change hook) and keeps, per thread, the open interrupts of the latest
state as ``OpenEntry`` rows, and returns what changed (``Change``: opened,
answered — gone from the state, whether resolved, cancelled or the thread
deleted — expired, or updated: its tool call became known). ``listing``
answers ``GET /interrupts`` from each tenant's entries, kept in order
(``interrupt_order``: a page costs its size, walked by cursor); ``due``
pops the expiry heap for the feed's single timer (``inbox_feed``).

Order: an entry's ``opened_ms`` is its ``openedAt`` (the gatekeeper's clock
when it applied the run's interrupted end, kept while the interrupt is
open), else, in a state written before that field, the state's
``updatedAt``; the interrupts one run raised together keep the order it
raised them in. Both are read from the state alone, never from what this
instance saw before (the first state it happened to read: a restored or
compacted one is dated by a later rejection), so every instance orders alike
and a cursor walk may move between them. Expiry is read
with ``services.agui.expiry`` exactly as the gatekeeper decides it.
Ownership follows ``tenancy.may_read`` (an owned thread for its owner
only; an unowned one for everyone while authentication is off, for no
tenant when it is on). A delegation's child thread (its state names a
``parentRunId``) offers nothing: its interrupts were carried up to its
parent and are answered there, once (the gatekeeper refuses an answer sent
to the child, ``answer_at_parent``), so the inbox lists only the parent's
copies. Pure: no I/O, the clock is an argument.

The gated tool call: a state names it (``toolCallId``) but its name and
arguments live on the events topic. An entry opened with a tool call id
asks for them (``take_loads``: per thread, the call ids and from when to
read — the run's admission, ``runStartedAt``, less ``SKEW``); the feed's
loader reads that window of the thread's events partition once, in the
background, and hands back what it found (``learn``: ``updated`` changes).
So a listing never reads a topic, and what is held is bounded by
configuration (``Budget``): at most ``tool_calls`` calls (one per open
interrupt gating one, dropped with it), arguments kept only up to
``argument_bytes`` of JSON text. An interrupt is held whole only up to
``interrupt_bytes`` of JSON; a larger one (a 100 kB ``responseSchema``:
4,000 of them held 540 MB beside a thread view on disk, found by probing)
is held slim (``SLIM``: what filtering, ordering and the expiry timer read),
and ``InterruptIndex.wire`` takes the rest from the thread view (``lookup``:
its cache or its store) when an item is listed or announced. A call not
found (no ``runStartedAt``, made in a run older than the window, past
retention) or over budget is listed without it; ``GET
/interrupts/threads/{id}`` reads the whole thread.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import islice
from typing import Any, Literal

import orjson

from services.agui.expiry import read_expiry
from services.consumer.interrupt_order import Key, TenantOrder

ChangeKind = Literal["opened", "answered", "expired", "updated"]
SKEW = timedelta(seconds=60)
"""How far before a run's admission its tool calls are looked for (other hosts' clocks:
the gatekeeper's expirer reads a run's events from the same point)."""


@dataclass(frozen=True, slots=True)
class Budget:
    """What the index may hold of tool calls (``AGUI_INBOX_TOOL_CALLS``, ``..._BYTES``)."""

    tool_calls: int = 10_000
    argument_bytes: int = 16_384
    interrupt_bytes: int = 4_096
    """An interrupt held whole up to this much JSON (``AGUI_INBOX_INTERRUPT_BYTES``)."""


SLIM = ("id", "reason", "toolCallId", "expiresAt", "subagentRunId")
"""What an interrupt held slim keeps (``Budget.interrupt_bytes``)."""
Lookup = Callable[[str, str], Mapping[str, Any] | None]
"""(threadId, interruptId) → the open interrupt in wire form, from the thread view."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The tool call an interrupt gates, as the agent streamed it."""

    id: str
    name: str | None
    arguments: Any
    """The JSON value of the arguments text (the text itself when it is not JSON)."""
    kept: bool = True
    """False: the arguments were larger than the budget allows and are not held."""

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.name is not None:
            out["name"] = self.name
        if self.kept:
            out["arguments"] = self.arguments
        return out


def tool_calls_of(messages: Iterable[Mapping[str, Any]], argument_bytes: int | None = None
                  ) -> dict[str, ToolCall]:
    """Every tool call of a transcript's messages by id (``services.agui.transcript``);
    arguments longer than ``argument_bytes`` (None: no limit) are not kept."""
    calls: dict[str, ToolCall] = {}
    for message in messages:
        for call in message.get("toolCalls") or ():
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            function = call.get("function") or {}
            name, raw = function.get("name"), function.get("arguments") or ""
            name = name if isinstance(name, str) else None
            raw = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
            if argument_bytes is not None and len(raw.encode()) > argument_bytes:
                calls[call["id"]] = ToolCall(call["id"], name, None, kept=False)
                continue
            try:
                arguments: Any = orjson.loads(raw) if raw else {}
            except orjson.JSONDecodeError:
                arguments = raw
            calls[call["id"]] = ToolCall(call["id"], name, arguments)
    return calls


@dataclass(frozen=True, slots=True)
class Load:
    """Tool calls to look for in one thread's events, from ``since_ms`` on."""

    thread_id: str
    since_ms: int
    call_ids: frozenset[str]


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
    tool_call: ToolCall | None = None
    whole: bool = True
    """False: ``interrupt`` holds only ``SLIM`` (``InterruptIndex.wire`` finds the rest)."""
    rank: int = 0
    """Its place in the state that opened it (``interrupt_order``)."""

    @property
    def sort_key(self) -> Key:
        return -self.opened_ms, self.thread_id, self.rank, self.interrupt_id

    @property
    def interrupt_id(self) -> str:
        return str(self.interrupt.get("id", ""))

    @property
    def tool_call_id(self) -> str | None:
        found = self.interrupt.get("toolCallId")
        return found if isinstance(found, str) and found else None

    def expired(self, now_ms: int) -> bool:
        return self.expires_ms is not None and self.expires_ms <= now_ms

    def wire(self, now_ms: int, full: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The ``GET /interrupts`` item (camelCase, optional members omitted); ``full``: the
        whole interrupt, for an entry held slim."""
        i = full if full is not None and not self.whole else self.interrupt
        out: dict[str, Any] = {"id": self.interrupt_id, "threadId": self.thread_id,
                               "runId": self.run_id}
        if self.agent is not None:
            out["agent"] = self.agent
        for name in ("reason", "message", "toolCallId", "responseSchema", "expiresAt",
                     "metadata", "subagentRunId"):
            if i.get(name) is not None:
                out[name] = i[name]
        if self.expires_ms is not None:
            # the instant the gatekeeper reads from expiresAt (an offset-less time is UTC):
            # the page compares this, never its own Date.parse (the browser's time zone)
            out["expiresAtMs"] = self.expires_ms
        if self.tool_call is not None:
            out["toolCall"] = self.tool_call.wire()
        out["expired"] = self.expired(now_ms)
        out["openedAt"] = self.opened_ms
        return out


@dataclass(frozen=True, slots=True)
class Change:
    """What happened to one interrupt."""

    kind: ChangeKind
    entry: OpenEntry
    full: Mapping[str, Any] | None = None
    """The whole interrupt of an entry held slim, from the state that opened it (the
    view may not have stored that state yet when the change is announced)."""

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
    next_key: Key | None = None
    """The last item's key when more follow: the next page starts after it."""


def visible(owner: str | None, principal: str, *, enforced: bool) -> bool:
    """``tenancy.may_read`` on the owner alone (a unit test holds them equal)."""
    if owner is not None:
        return owner == principal
    return not enforced


HEAP_SLACK = 1024
"""Stale expiry entries the heap may hold beyond twice its live ones."""


def _instant(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        return None


@dataclass
class InterruptIndex:
    """The open interrupts of every thread the view holds (see the module docstring)."""

    budget: Budget = field(default_factory=Budget)
    lookup: Lookup | None = None
    """Where an entry held slim finds the rest of its interrupt (the thread view)."""
    _threads: dict[str, tuple[OpenEntry, ...]] = field(default_factory=dict)
    _heap: list[tuple[int, int, str, str]] = field(default_factory=list)
    """(expires_ms, order, threadId, interruptId) of entries with an expiry."""
    _order: itertools.count[int] = field(default_factory=itertools.count)
    _loads: dict[str, Load] = field(default_factory=dict)
    """Tool calls to look for, per thread, not taken by the loader yet."""
    _asked: int = 0
    """Tool calls asked for (queued, or taken and not learned yet)."""
    _held: int = 0
    """Entries holding a tool call."""
    _rebuild_at: int = HEAP_SLACK
    """Heap entries past which the heap is rebuilt from the open entries."""
    _announced_ms: int | None = None
    """The latest ``due`` instant: the expiries at or before it were told already."""
    _fulls: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """The whole interrupts of the state ``apply`` takes now, of entries held slim."""
    _sorted: TenantOrder[OpenEntry] = field(default_factory=TenantOrder)
    """The open entries per owner, newest first (what ``listing`` reads)."""

    def __len__(self) -> int:
        return sum(len(v) for v in self._threads.values())

    @property
    def tool_calls_held(self) -> int:
        return self._held

    def open_of(self, principal: str) -> int:
        """The open interrupts of ``principal``'s threads (what the run limit counts)."""
        return self._sorted.size(principal)

    def apply(self, thread_id: str, value: bytes | None) -> list[Change]:
        """Take the thread's new state (None: deleted); what opened and what was answered."""
        before = {e.interrupt_id: e for e in self._threads.get(thread_id, ())}
        after, since_ms = self._entries(thread_id, value, before)
        for entry in before.values():
            self._sorted.remove(entry)
        for entry in after:
            self._sorted.add(entry)
        if after:
            self._threads[thread_id] = after
        else:
            self._threads.pop(thread_id, None)
            dropped = self._loads.pop(thread_id, None)
            self._asked -= len(dropped.call_ids) if dropped else 0
        self._held += (sum(e.tool_call is not None for e in after)
                       - sum(e.tool_call is not None for e in before.values()))
        now_ids = {e.interrupt_id for e in after}
        changes = [Change("answered", e) for i, e in before.items() if i not in now_ids]
        wanted = set()
        fulls = self._fulls
        self._fulls = {}
        for entry in after:
            if entry.interrupt_id not in before:
                changes.append(Change("opened", entry, fulls.get(entry.interrupt_id)))
                if entry.expires_ms is not None:
                    heapq.heappush(self._heap, (entry.expires_ms, entry.order, thread_id,
                                                entry.interrupt_id))
                if entry.tool_call_id is not None and entry.tool_call is None:
                    wanted.add(entry.tool_call_id)
        if wanted and since_ms is not None:
            self._ask(thread_id, since_ms, wanted)
        if len(self._heap) > self._rebuild_at:
            self._rebuild_heap()
        return changes

    def wire(self, entry: OpenEntry, now_ms: int,
             full: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The entry's ``GET /interrupts`` item, whole: a slim one completed by ``full`` or
        ``lookup`` (listed slim when the view no longer has it: answered meanwhile)."""
        if full is None and not entry.whole and self.lookup is not None:
            full = self.lookup(entry.thread_id, entry.interrupt_id)
        return entry.wire(now_ms, full)

    def wire_change(self, change: Change, now_ms: int) -> dict[str, Any]:
        return {"type": change.kind, "interrupt": self.wire(change.entry, now_ms, change.full)}

    def _rebuild_heap(self) -> None:
        """The heap of the open entries' expiries still to tell, only: an answered
        interrupt leaves its entry until its instant (for good, at a far one); next
        rebuilt once the heap has doubled."""
        told = self._announced_ms
        self._heap = [(e.expires_ms, e.order, e.thread_id, e.interrupt_id)
                      for e in self.entries()
                      if e.expires_ms is not None and (told is None or e.expires_ms > told)]
        heapq.heapify(self._heap)
        self._rebuild_at = 2 * len(self._heap) + HEAP_SLACK

    def _ask(self, thread_id: str, since_ms: int, call_ids: set[str]) -> None:
        queued = self._loads.get(thread_id)
        fresh = sorted(call_ids - (queued.call_ids if queued else frozenset()))
        fresh = fresh[:max(0, self.budget.tool_calls - self._held - self._asked)]
        if not fresh:
            return
        self._asked += len(fresh)
        if queued is not None:
            self._loads[thread_id] = Load(thread_id, min(queued.since_ms, since_ms),
                                          queued.call_ids | frozenset(fresh))
        else:
            self._loads[thread_id] = Load(thread_id, since_ms, frozenset(fresh))

    def take_loads(self) -> list[Load]:
        """The tool calls to look for (each load must come back through ``learn``)."""
        loads = list(self._loads.values())
        self._loads.clear()
        return loads

    def learn(self, load: Load, found: Mapping[str, ToolCall]) -> list[Change]:
        """What the loader found for ``load`` (nothing when its read failed): the entries
        still open that now carry their tool call, as ``updated`` changes."""
        self._asked -= len(load.call_ids)
        entries = self._threads.get(load.thread_id)
        if not entries:
            return []
        changes = []
        out = []
        for entry in entries:
            call_id = entry.tool_call_id
            call = found.get(call_id) if call_id in load.call_ids else None
            if (call is not None and entry.tool_call is None
                    and self._held < self.budget.tool_calls):
                entry = replace(entry, tool_call=call)
                self._sorted.add(entry)
                self._held += 1
                changes.append(Change("updated", entry))
            out.append(entry)
        self._threads[load.thread_id] = tuple(out)
        return changes

    def _entries(self, thread_id: str, value: bytes | None, before: dict[str, OpenEntry]
                 ) -> tuple[tuple[OpenEntry, ...], int | None]:
        """The state's open interrupts, and from when its tool calls may be read."""
        if value is None:
            return (), None
        try:
            state = orjson.loads(value)
        except orjson.JSONDecodeError:
            return (), None
        if not isinstance(state, dict) or state.get("threadId") != thread_id:
            return (), None  # another thread's state under this key: not this thread's
        opened = state.get("openInterrupts")
        if not isinstance(opened, list) or not opened or state.get("parentRunId") is not None:
            return (), None  # a delegation's child: its parent offers its interrupts
        agent, principal = state.get("agent"), state.get("principal")
        updated = _instant(state.get("updatedAt")) or 0
        started = _instant(state.get("runStartedAt"))
        out = []
        for rank, item in enumerate(opened):
            interrupt = item.get("interrupt") if isinstance(item, dict) else None
            if not isinstance(interrupt, dict) or not isinstance(interrupt.get("id"), str):
                continue
            dated = _instant(item.get("openedAt"))
            known = before.get(interrupt["id"])
            expires = interrupt.get("expiresAt")
            whole = len(orjson.dumps(interrupt)) <= self.budget.interrupt_bytes
            if not whole:
                self._fulls[interrupt["id"]] = interrupt
            out.append(OpenEntry(
                thread_id=thread_id, run_id=str(item.get("runId", "")),
                agent=agent if isinstance(agent, str) else None,
                principal=principal if isinstance(principal, str) else None,
                interrupt=interrupt if whole else {k: interrupt[k] for k in SLIM
                                                   if k in interrupt},
                whole=whole,
                opened_ms=dated if dated is not None else updated,
                order=known.order if known else next(self._order),
                rank=rank,
                expires_ms=read_expiry(expires if isinstance(expires, str) else None).epoch_ms,
                tool_call=known.tool_call if known else None))
        since = started - int(SKEW.total_seconds() * 1000) if started is not None else None
        return tuple(out), since

    @property
    def expiry_entries(self) -> int:
        """Entries in the expiry heap, stale ones included (bounded by the rebuilds)."""
        return len(self._heap)

    def next_expiry_ms(self) -> int | None:
        """When the earliest pending expiry falls (possibly of an entry since answered)."""
        return self._heap[0][0] if self._heap else None

    def due(self, now_ms: int) -> list[Change]:
        """Pop every expiry at or before ``now_ms`` whose interrupt is still open."""
        out = []
        self._announced_ms = max(self._announced_ms or now_ms, now_ms)
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
                limit: int, offset: int = 0, after: Key | None = None) -> Page:
        """The caller's open interrupts matching ``filters``, newest first, one page: from
        just after the key ``after`` (a cursor), else from ``offset``. Only the caller's
        tenant is read; a filter's ``total`` counts what it admits of it."""
        held = self._sorted.owners(principal, unowned=not enforced)
        admitted = (e for e in TenantOrder[OpenEntry].walk(held, after)
                    if filters.admit(e, now_ms))
        items = list(islice(admitted, offset, offset + limit + 1))
        if filters == Filters():
            total = TenantOrder.count(held)
        else:
            total = sum(filters.admit(e, now_ms) for e in TenantOrder[OpenEntry].walk(held, None))
        if len(items) <= limit:
            return Page(items, total, None)
        return Page(items[:limit], total, offset + limit, items[limit - 1].sort_key)
