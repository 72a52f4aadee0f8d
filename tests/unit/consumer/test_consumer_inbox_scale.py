"""The interrupt inbox at scale (tens of thousands of open interrupts): the feed's
bursts and their cost, paging by cursor, and a tenant's listing cost.

Found by probing a live relay (one broker, one consumer-service instance, 10,000
interrupts of one tenant sharing one deadline, a feed client reading as fast
as it could): at the deadline the feed announced 10,000 ``expired`` changes in
one timer callback; the reading client received 1,966 of them and its stream
ended (dropped as a stalled subscriber), and a browser tab reconnects and
re-lists all 10,000. While paging ``GET /interrupts?limit=500`` once a
second during the expiry policy's cancellations, 50 interrupts open before
and after the walk were missing from it and 8 were listed twice (offset
paging over a list that shifts). With 50,000 open interrupts of tenant A, a
``GET /interrupts`` by tenant B (10 interrupts) cost 9.5 ms of CPU, 3.7 ms at
10,000 and 0.3 ms at 1,000: every request walks, filters and sorts every
tenant's entries.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from ag_ui.core import Interrupt

from contracts import OpenInterrupt, ThreadState, encode
from services.consumer import inbox_feed
from services.consumer.inbox_feed import SLICE, InterruptFeed, Subscriber, stream_body
from services.consumer.interrupt_order import decode_cursor, encode_cursor
from services.consumer.interrupts import Filters, InterruptIndex

T0 = 1_800_000_000_000
APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}},
            "required": ["approved"]}


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def approval(n: int, *, principal: str = "a", expires_ms: int | None = None,
             updated_ms: int = T0, open_: bool = True) -> bytes:
    interrupt = Interrupt(id=f"approve-{n}", reason="tool_approval",
                          message=f"Delete file {n}?", tool_call_id=f"call-{n}",
                          response_schema=APPROVAL,
                          expires_at=iso(expires_ms) if expires_ms is not None else None)
    return encode(ThreadState(
        thread_id=f"t{n}", status="interrupted" if open_ else "idle", agent="approval",
        principal=principal, run_id=f"r{n}", interrupted_run_id=f"r{n}" if open_ else None,
        open_interrupts=[OpenInterrupt(run_id=f"r{n}", interrupt=interrupt)] if open_ else [],
        updated_at=datetime.fromtimestamp(updated_ms / 1000, UTC)))


def drain(sub: object) -> int:
    frames = 0
    queue = sub.queue  # type: ignore[attr-defined]
    while not queue.empty():
        frames += queue.get_nowait().count(b"data: ")
    sub.queued = 0  # type: ignore[attr-defined]
    return frames


async def test_a_mass_expiry_does_not_drop_a_subscriber_that_reads_everything() -> None:
    """10,000 interrupts with one deadline: the subscriber has read every change so far
    (it is not behind), yet the expiry burst of one timer callback passes the 1 MiB
    queue bound and it is dropped as if it had stalled (README: "a stalled one, not a
    burst: a batch of changes is queued whole")."""
    now = [T0]
    feed = InterruptFeed(clock=lambda: now[0])
    sub = feed.subscribe("a", enforced=True)
    for n in range(10_000):
        feed.on_state(f"t{n}", approval(n, expires_ms=T0 + 60_000))
        if n % 500 == 0:
            drain(sub)
    drain(sub)
    assert not sub.dropped
    now[0] = T0 + 60_000
    feed.fire()  # the one timer: every interrupt expired at this instant
    await feed.flushed()  # announced in slices, the loop free between them
    received = drain(sub)
    feed.stop()
    assert not sub.dropped, (f"a subscriber that was not behind was dropped by one mass "
                             f"expiry: {received} of 10000 'expired' changes queued")
    assert received == 10_000


async def test_announcing_a_mass_expiry_does_not_stall_the_loop_per_subscriber(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 feed subscribers (``AGUI_INBOX_MAX_FEEDS``' default) of tenant B, who may
    see none of tenant A's 10,000 interrupts: announcing their expiry asked, for every
    change, every subscriber whether it may see it (10,000,000 checks, 1 to 2 s of the
    event loop, every SSE stream and request of the instance waiting). Counted, not
    timed: a subscriber who sees nothing costs nothing per change."""
    now = [T0]
    feed = InterruptFeed(clock=lambda: now[0])
    for n in range(10_000):
        feed.on_state(f"t{n}", approval(n, expires_ms=T0 + 60_000))
    others = [feed.subscribe("b", enforced=True) for _ in range(1_000)]
    checks = [0]
    real = inbox_feed.visible

    def counted(*args: Any, **kwargs: Any) -> bool:
        checks[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_feed, "visible", counted)
    now[0] = T0 + 60_000
    feed.fire()
    feed.stop()
    await feed.flushed()
    assert all(s.queue.empty() for s in others)  # they were shown nothing
    assert checks[0] <= 10_000, (f"{checks[0]:,} visibility checks announcing 10,000 "
                                 "changes to 1,000 subscribers who see none")


async def test_a_mass_expiry_seen_by_many_is_announced_in_slices_in_order() -> None:
    """100 streams of the tenant whose 10,000 interrupts expire: each loop callback
    announces ``SLICE`` changes, so streams and requests run between them; a change that
    comes meanwhile (an answer) is announced after the burst, never inside it."""
    now = [T0]
    feed = InterruptFeed(clock=lambda: now[0])
    for n in range(10_000):
        feed.on_state(f"t{n}", approval(n, expires_ms=T0 + 60_000))
    subs = [feed.subscribe("a", enforced=True) for _ in range(100)]

    async def read(sub: Subscriber) -> list[bytes]:
        """The type of each change the stream sends, in order."""
        return [frame[:20] async for chunk in stream_body(sub, keepalive_s=5)
                for frame in chunk.split(b"data: ")[1:]]
    readers = [asyncio.create_task(read(s)) for s in subs]
    await asyncio.sleep(0)
    now[0] = T0 + 60_000
    feed.fire()
    first = subs[0].queue.get_nowait()
    subs[0].queue.put_nowait(first)
    assert first.count(b"data: ") == SLICE
    feed.on_state("t0", approval(0, open_=False))  # answered while the burst goes out
    await feed.flushed()
    feed.close()
    assert not any(s.dropped and s.queued for s in subs)
    for kinds in await asyncio.gather(*readers):
        assert len(kinds) == 10_001
        assert kinds[-1] == b'{"type":"answered","'
        assert all(k == b'{"type":"expired","i' for k in kinds[:-1])


def walk(index: InterruptIndex, limit: int, between: list) -> list[str]:  # type: ignore[type-arg]
    """``listInterrupts`` of the page: cursor paging until no ``next``; ``between`` runs
    after each page (what happens meanwhile)."""
    seen: list[str] = []
    cursor: str | None = None
    page_no = 0
    while True:
        page = index.listing("a", enforced=True, filters=Filters(), now_ms=T0, limit=limit,
                             after=decode_cursor(cursor) if cursor is not None else None)
        seen += [e.interrupt_id for e in page.items]
        if page.next_key is None:
            return seen
        cursor = encode_cursor(page.next_key)
        if page_no < len(between):
            between[page_no]()
        page_no += 1


def test_paging_skips_no_interrupt_open_throughout_while_others_are_answered() -> None:
    """Newest first: interrupts answered on a page already read moved every later item
    forward, so the next offset started past items nobody had seen; a cursor does not."""
    index = InterruptIndex()
    for n in range(1_000):
        index.apply(f"t{n}", approval(n, updated_ms=T0 + n))
    answered = [f"t{n}" for n in range(990, 1000)]  # on the first page (newest)

    def answer() -> None:
        for thread in answered:
            index.apply(thread, approval(int(thread[1:]), open_=False))
    seen = walk(index, 100, [answer])
    open_throughout = {f"approve-{n}" for n in range(990)}
    missing = sorted(open_throughout - set(seen))
    assert not missing, (f"{len(missing)} interrupts open before, during and after the walk "
                         f"were never listed: {missing[:5]}...")


def test_paging_lists_no_interrupt_twice_while_others_open() -> None:
    """An interrupt opening during the walk (newest, so first) pushed every item back by
    one: by offset, the last item of a page read was listed again at the top of the next
    (the page held it twice and its resume named it twice, ``duplicate_entry``)."""
    index = InterruptIndex()
    for n in range(1_000):
        index.apply(f"t{n}", approval(n, updated_ms=T0 + n))

    def open_more() -> None:
        for n in range(1_000, 1_005):
            index.apply(f"t{n}", approval(n, updated_ms=T0 + n))
    seen = walk(index, 100, [open_more])
    twice = sorted({i for i in seen if seen.count(i) > 1})
    assert not twice, f"{len(twice)} interrupts listed twice in one walk: {twice}"
    assert set(seen) == {f"approve-{n}" for n in range(1_000)}


def test_a_cursor_is_the_sort_key_and_nothing_else_is_one() -> None:
    key = (-T0, "thread/é", 2, "approve-1")
    assert decode_cursor(encode_cursor(key)) == key
    for bad in ("", "x", "W10", encode_cursor(key)[:-2] + "!!", "WzEsMiwzLDRd"):
        assert decode_cursor(bad) is None


def test_a_tenants_listing_does_not_cost_what_other_tenants_hold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tenant B has 10 open interrupts beside tenant A's 50,000. Its ``GET /interrupts``
    walked, filtered and sorted every tenant's on every request (205x slower than beside
    500; found by probing). Counted, not timed: the listing reads tenant B's own only,
    never every tenant's entries, and asks the filters about B's alone."""
    index = InterruptIndex()
    for n in range(10):
        index.apply(f"t{100_000 + n}", approval(100_000 + n, principal="b"))
    for n in range(50_000):
        index.apply(f"t{n}", approval(n))

    def every_tenants(_: InterruptIndex) -> None:
        raise AssertionError("a tenant's listing walked every tenant's interrupts")

    asked = [0]
    admit = Filters.admit

    def counted(self: Filters, *args: Any) -> bool:
        asked[0] += 1
        return admit(self, *args)

    monkeypatch.setattr(InterruptIndex, "entries", every_tenants)
    monkeypatch.setattr(Filters, "admit", counted)
    page = index.listing("b", enforced=True, filters=Filters(), now_ms=T0, offset=0,
                         limit=100)
    assert len(page.items) == 10
    assert asked[0] <= 20, f"the filters were asked about {asked[0]:,} interrupts"
