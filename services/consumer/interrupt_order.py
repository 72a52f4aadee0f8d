"""The inbox listing's order, per tenant, and the cursor a page walk resumes from.

``GET /interrupts`` is newest first. Offset paging over that list skipped
and repeated items whenever interrupts opened or closed during a walk (an
answer on a page read moves every later item forward; an opening pushes
them back), so a page ends with a ``Cursor``: the sort key of its last
item, and the next page starts strictly after it, wherever that item now
is (or would be: answered meanwhile). The key is ``(-openedAt, threadId,
rank, id)``: ``rank`` is the interrupt's place in the state that opened it
(a run's interrupts keep the order it raised them in), and nothing in it is
an instance's own counter, so a walk may go from one instance to another.

``TenantOrder`` keeps each owner's open interrupts sorted by that key (one
``SortedDict`` per owner, ``None`` for unowned threads): a page costs its
size and the log of its tenant's count, never what other tenants hold (a
tenant's listing of 10 beside 50,000 of another's had taken 118x longer
than beside 500). Pure: no I/O.
"""

from __future__ import annotations

import base64
import heapq
from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar

import orjson
from sortedcontainers import SortedDict

Key = tuple[int, str, int, str]
"""(-opened_ms, thread_id, rank, interrupt_id): ascending is newest first."""


class Ordered(Protocol):
    @property
    def sort_key(self) -> Key: ...

    @property
    def principal(self) -> str | None: ...


E = TypeVar("E", bound=Ordered)


def encode_cursor(key: Key) -> str:
    """The opaque ``next`` token of a page ending at ``key``."""
    opened, thread, rank, interrupt = key
    raw = orjson.dumps([-opened, thread, rank, interrupt])
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(token: str) -> Key | None:
    """The key a ``cursor`` names; None when it is not one this service made."""
    try:
        value = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if (not isinstance(value, list) or len(value) != 4
            or not all(type(v) is int for v in value[0::2])
            or not all(isinstance(v, str) for v in value[1::2])):
        return None
    return -value[0], value[1], value[2], value[3]


class TenantOrder(Generic[E]):
    """Each owner's open interrupts, sorted newest first."""

    def __init__(self) -> None:
        self._owners: dict[str | None, SortedDict] = {}

    def add(self, entry: E) -> None:
        self._owners.setdefault(entry.principal, SortedDict())[entry.sort_key] = entry

    def remove(self, entry: E) -> None:
        held = self._owners.get(entry.principal)
        if held is None:
            return
        held.pop(entry.sort_key, None)
        if not held:
            del self._owners[entry.principal]

    def size(self, owner: str) -> int:
        """How many open interrupts ``owner``'s threads hold."""
        held = self._owners.get(owner)
        return 0 if held is None else len(held)

    def owners(self, principal: str, *, unowned: bool) -> list[SortedDict]:
        """The sorted entries of ``principal`` and, when ``unowned``, of unowned threads."""
        return [held for owner in ((principal, None) if unowned else (principal,))
                if (held := self._owners.get(owner)) is not None]

    @staticmethod
    def count(held: Iterable[SortedDict]) -> int:
        return sum(len(h) for h in held)

    @staticmethod
    def walk(held: list[SortedDict], after: Key | None) -> Iterator[E]:
        """The entries of ``held`` in order, from just after ``after`` (None: the first)."""
        def each(h: SortedDict) -> Iterator[tuple[Key, E]]:
            keys = h.irange(minimum=after, inclusive=(False, True)) if after else iter(h)
            return ((k, h[k]) for k in keys)
        if len(held) == 1:
            return (e for _, e in each(held[0]))
        return (e for _, e in heapq.merge(*map(each, held), key=lambda kv: kv[0]))
