"""The open-interrupt index and its feed: what opens, is answered, expires, and who sees it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt

from contracts import OpenInterrupt, ThreadState, encode
from services.consumer.inbox_feed import QUEUE_BYTES, InboxSettings, InterruptFeed, stream_body
from services.consumer.interrupts import (
    SKEW,
    Budget,
    Filters,
    InterruptIndex,
    Load,
    ToolCall,
    tool_calls_of,
    visible,
)
from services.consumer.problems import RetryLater
from services.consumer.tenancy import may_read

T0 = 1_800_000_000_000


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def state(thread: str, *interrupts: Interrupt, principal: str | None = "a", agent: str = "x",
          updated_ms: int = T0, started_ms: int | None = None,
          opened_ms: int | None = None) -> bytes:
    """``opened_ms``: the interrupts' ``openedAt`` (None: a state written before it)."""
    opened_at = datetime.fromtimestamp(opened_ms / 1000, UTC) if opened_ms is not None else None
    return encode(ThreadState(
        run_started_at=(datetime.fromtimestamp(started_ms / 1000, UTC)
                        if started_ms is not None else None),
        thread_id=thread, status="interrupted" if interrupts else "idle", agent=agent,
        principal=principal, run_id="r1", interrupted_run_id="r1" if interrupts else None,
        open_interrupts=[OpenInterrupt(run_id="r1", interrupt=i, opened_at=opened_at)
                         for i in interrupts],
        updated_at=datetime.fromtimestamp(updated_ms / 1000, UTC)))


def listing(index: InterruptIndex, principal: str = "a", *, enforced: bool = True,
            now: int = T0, **filters: object) -> list[str]:
    page = index.listing(principal, enforced=enforced, filters=Filters(**filters),  # type: ignore[arg-type]
                         now_ms=now, offset=0, limit=100)
    return [e.interrupt_id for e in page.items]


def test_opened_then_answered_changes_and_newest_first() -> None:
    index = InterruptIndex()
    first = index.apply("t1", state("t1", Interrupt(id="i1", reason="tool_approval")))
    assert [(c.kind, c.entry.interrupt_id) for c in first] == [("opened", "i1")]
    index.apply("t2", state("t2", Interrupt(id="i2", reason="tool_approval"),
                            updated_ms=T0 + 5))
    assert listing(index) == ["i2", "i1"]
    # the same state again changes nothing
    assert index.apply("t1", state("t1", Interrupt(id="i1", reason="tool_approval"))) == []
    assert listing(index) == ["i2", "i1"]
    answered = index.apply("t1", state("t1"))
    assert [(c.kind, c.entry.interrupt_id) for c in answered] == [("answered", "i1")]
    assert [(c.kind, c.entry.interrupt_id) for c in index.apply("t2", None)] == [
        ("answered", "i2")]
    assert listing(index) == []
    assert len(index) == 0


def test_a_state_keyed_otherwise_than_its_thread_id_opens_nothing() -> None:
    """Another writer's state under a thread's key: its interrupts are not that thread's,
    so the inbox lists none of them (and answering one would name the wrong thread)."""
    index = InterruptIndex()
    assert index.apply("t9", state("t9other", Interrupt(id="i9", reason="tool_approval"))) == []
    assert listing(index) == []
    index.apply("t1", state("t1", Interrupt(id="i1", reason="tool_approval")))
    changed = index.apply("t1", state("t1x", Interrupt(id="i1", reason="tool_approval")))
    assert [(c.kind, c.entry.interrupt_id) for c in changed] == [("answered", "i1")]
    assert listing(index) == []


def test_a_child_threads_interrupts_are_offered_on_its_parent_only() -> None:
    """A delegation's child (``parentRunId``) carried its question up: the parent's copy is
    the one listed; the child's, answered there, would break the pipeline."""
    index = InterruptIndex()
    carried = Interrupt(id="review/sign-off", reason="approval",
                        metadata={"agui-relay.child": {"threadId": "t1/review-0a"}})
    index.apply("t1", state("t1", carried))
    child = orjson.loads(state("t1/review-0a", Interrupt(id="sign-off", reason="approval")))
    assert index.apply("t1/review-0a", orjson.dumps({**child, "parentRunId": "r1"})) == []
    assert listing(index) == ["review/sign-off"]
    # a child whose run an operator started (no parentRunId) offers its own again
    opened = index.apply("t1/review-0a", orjson.dumps(child))
    assert [(c.kind, c.entry.interrupt_id) for c in opened] == [("opened", "sign-off")]
    answered = index.apply("t1/review-0a", orjson.dumps({**child, "parentRunId": "r2"}))
    assert [(c.kind, c.entry.interrupt_id) for c in answered] == [("answered", "sign-off")]


def test_an_interrupt_is_dated_by_its_opened_at_whatever_the_state_was_updated() -> None:
    """A rejected request rewrites an interrupted thread's state (a later ``updatedAt``,
    the same interrupts): the interrupt keeps the ``openedAt`` the gatekeeper gave it."""
    index = InterruptIndex()
    index.apply("t1", state("t1", Interrupt(id="i1", reason="r"), opened_ms=T0,
                            updated_ms=T0))
    index.apply("t2", state("t2", Interrupt(id="i2", reason="r"), opened_ms=T0 + 5,
                            updated_ms=T0 + 5))
    assert index.apply("t1", state("t1", Interrupt(id="i1", reason="r"), opened_ms=T0,
                                   updated_ms=T0 + 9)) == []
    assert listing(index) == ["i2", "i1"]
    assert [e.wire(T0)["openedAt"] for e in index.entries()] == [T0, T0 + 5]


def test_a_state_written_before_opened_at_is_dated_by_its_own_updated_at() -> None:
    """The state alone dates its interrupts, never what this instance read before: one
    that restored only the rewritten state orders them as one that saw every state."""
    watched, restored = InterruptIndex(), InterruptIndex()
    watched.apply("t1", state("t1", Interrupt(id="i1", reason="r"), updated_ms=T0))
    for index in (watched, restored):
        index.apply("t2", state("t2", Interrupt(id="i2", reason="r"), updated_ms=T0 + 5))
        index.apply("t1", state("t1", Interrupt(id="i1", reason="r"), updated_ms=T0 + 9))
    assert listing(watched) == listing(restored) == ["i1", "i2"]


def test_one_runs_interrupts_keep_the_order_it_raised_them_in() -> None:
    index = InterruptIndex()
    index.apply("old", state("old", Interrupt(id="o", reason="r"), updated_ms=T0))
    index.apply("t", state("t", Interrupt(id="first", reason="r"),
                           Interrupt(id="second", reason="r"), updated_ms=T0 + 1))
    assert listing(index) == ["first", "second", "o"]


def test_tenants_never_see_each_others_interrupts() -> None:
    index = InterruptIndex()
    index.apply("ta", state("ta", Interrupt(id="ia", reason="r"), principal="a"))
    index.apply("tb", state("tb", Interrupt(id="ib", reason="r"), principal="b"))
    index.apply("tn", state("tn", Interrupt(id="in", reason="r"), principal=None))
    assert listing(index, "a") == ["ia"]
    assert listing(index, "b") == ["ib"]
    assert sorted(listing(index, "anonymous", enforced=False)) == ["in"]


def test_a_tenants_open_interrupts_are_counted_as_they_open_and_are_answered() -> None:
    """What ``AGUI_MAX_OPEN_INTERRUPTS`` counts: the tenant's own, a child's carried-up
    question once (on its parent), none of another tenant's or of unowned threads."""
    index = InterruptIndex()
    index.apply("ta", state("ta", Interrupt(id="i1", reason="r"), Interrupt(id="i2", reason="r")))
    index.apply("tb", state("tb", Interrupt(id="ib", reason="r"), principal="b"))
    index.apply("tn", state("tn", Interrupt(id="in", reason="r"), principal=None))
    carried = Interrupt(id="review/ok", reason="r",
                        metadata={"agui-relay.child": {"threadId": "tc/review-0a"}})
    index.apply("tc", state("tc", carried))
    child = orjson.loads(state("tc/review-0a", Interrupt(id="ok", reason="r")))
    index.apply("tc/review-0a", orjson.dumps({**child, "parentRunId": "r1"}))
    assert (index.open_of("a"), index.open_of("b"), index.open_of("c")) == (3, 1, 0)
    index.apply("ta", state("ta", Interrupt(id="i2", reason="r")))  # i1 answered
    assert index.open_of("a") == 2
    index.apply("tc", None)
    index.apply("ta", state("ta"))
    assert index.open_of("a") == 0


@pytest.mark.parametrize("owner", ["a", "b", None])
@pytest.mark.parametrize("enforced", [True, False])
def test_visible_is_tenancys_rule(owner: str | None, enforced: bool) -> None:
    thread = ThreadState(thread_id="t", principal=owner)
    assert visible(owner, "a", enforced=enforced) == may_read(thread, "a", enforced=enforced)


def test_filters_and_pages() -> None:
    index = InterruptIndex()
    for n in range(5):
        index.apply(f"t{n}", state(f"t{n}", Interrupt(
            id=f"i{n}", reason="tool_approval" if n % 2 else "sign_off",
            expires_at=iso(T0 + 1000) if n < 2 else None), agent="x" if n < 3 else "y",
            updated_ms=T0 + n))
    assert listing(index, reason="sign_off") == ["i4", "i2", "i0"]
    assert listing(index, agent="y") == ["i4", "i3"]
    assert listing(index, expired=True, now=T0 + 1000) == ["i1", "i0"]
    assert listing(index, expired=False, now=T0 + 999) == ["i4", "i3", "i2", "i1", "i0"]
    page = index.listing("a", enforced=True, filters=Filters(), now_ms=T0, offset=2, limit=2)
    assert ([e.interrupt_id for e in page.items], page.total, page.next_offset) == (
        ["i2", "i1"], 5, 4)
    last = index.listing("a", enforced=True, filters=Filters(), now_ms=T0, offset=4, limit=2)
    assert last.next_offset is None


def test_wire_item_carries_what_the_inbox_shows() -> None:
    index = InterruptIndex()
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}}}
    index.apply("t", state("t", Interrupt(id="i", reason="tool_approval", message="Delete?",
                                          tool_call_id="c1", response_schema=schema,
                                          expires_at=iso(T0))))
    (entry,) = index.entries()
    assert entry.wire(T0) == {
        "id": "i", "threadId": "t", "runId": "r1", "agent": "x", "reason": "tool_approval",
        "message": "Delete?", "toolCallId": "c1", "responseSchema": schema,
        "expiresAt": iso(T0), "expiresAtMs": T0, "expired": True, "openedAt": T0}
    assert entry.wire(T0 - 1)["expired"] is False


def test_wire_item_carries_the_expiry_as_the_gatekeeper_reads_it() -> None:
    """The page compares ``expiresAtMs``, never its own ``Date.parse``: an offset-less
    time is UTC to the gatekeeper, the browser's own zone to ``Date.parse``."""
    index = InterruptIndex()
    local = iso(T0).removesuffix("Z")
    assert local == "2027-01-15T08:00:00"
    index.apply("t", state("t", Interrupt(id="a", reason="r", expires_at=local),
                           Interrupt(id="b", reason="r", expires_at="not a date"),
                           Interrupt(id="c", reason="r")))
    wired = {e.interrupt_id: e.wire(T0 - 1) for e in index.entries()}
    assert (wired["a"]["expiresAtMs"], wired["a"]["expired"]) == (T0, False)
    assert "expiresAtMs" not in wired["b"]  # unparseable: never expires
    assert wired["b"]["expiresAt"] == "not a date"
    assert "expiresAtMs" not in wired["c"]
    assert "expiresAt" not in wired["c"]


def test_unparseable_expiry_never_expires_like_the_gatekeeper() -> None:
    index = InterruptIndex()
    index.apply("t", state("t", Interrupt(id="i", reason="r", expires_at="not a date")))
    assert index.next_expiry_ms() is None
    assert listing(index, expired=False, now=T0 * 2) == ["i"]


def test_due_skips_answered_interrupts() -> None:
    index = InterruptIndex()
    index.apply("t1", state("t1", Interrupt(id="i1", reason="r", expires_at=iso(T0 + 10))))
    index.apply("t2", state("t2", Interrupt(id="i2", reason="r", expires_at=iso(T0 + 20))))
    index.apply("t1", state("t1"))
    assert index.due(T0 + 9) == []
    assert [c.entry.interrupt_id for c in index.due(T0 + 30)] == ["i2"]
    assert index.due(T0 + 40) == []
    assert index.next_expiry_ms() is None


def test_answered_interrupts_leave_no_expiry_behind_however_far_their_instant() -> None:
    index = InterruptIndex()
    far = iso(T0 + 86_400_000)
    index.apply("keep", state("keep", Interrupt(id="k", reason="r", expires_at=far)))
    for n in range(20_000):
        index.apply("t", state("t", Interrupt(id=f"i{n}", reason="r", expires_at=far)))
        index.apply("t", state("t"))
    assert len(index) == 1
    assert index.expiry_entries <= 2 * 1 + 1024 + 1
    assert [c.entry.interrupt_id for c in index.due(T0 + 86_400_000)] == ["k"]


def test_a_rebuilt_heap_tells_each_expiry_once() -> None:
    index = InterruptIndex()
    index.apply("old", state("old", Interrupt(id="o", reason="r", expires_at=iso(T0 + 10))))
    index.apply("new", state("new", Interrupt(id="n", reason="r", expires_at=iso(T0 + 500))))
    assert [c.entry.interrupt_id for c in index.due(T0 + 100)] == ["o"]  # told; still open
    for n in range(3_000):  # enough answered ones to rebuild the heap more than once
        index.apply("t", state("t", Interrupt(id=f"i{n}", reason="r", expires_at=iso(T0 + 900))))
        index.apply("t", state("t"))
    assert index.due(T0 + 400) == []
    assert [c.entry.interrupt_id for c in index.due(T0 + 1_000)] == ["n"]
    assert index.next_expiry_ms() is None


async def test_feed_announces_to_the_owner_only_and_times_expiry_with_one_timer() -> None:
    now = [T0]
    feed = InterruptFeed(clock=lambda: now[0])
    mine = feed.subscribe("a", enforced=True)
    theirs = feed.subscribe("b", enforced=True)
    feed.on_state("t", state("t", Interrupt(id="i", reason="r", expires_at=iso(T0 + 50))))
    assert b'"type":"opened"' in mine.queue.get_nowait()
    assert theirs.queue.empty()
    timer = feed._timer
    assert timer is not None
    feed.on_state("u", state("u", Interrupt(id="j", reason="r", expires_at=iso(T0 + 90))))
    assert feed._timer is timer  # the earliest expiry did not move: same single timer
    mine.queue.get_nowait()
    now[0] = T0 + 50
    await asyncio.sleep(0.1)  # the timer fires (call_later of 50 ms)
    frame = mine.queue.get_nowait()
    assert b'"type":"expired"' in frame
    assert b'"id":"i"' in frame
    assert b'"expired":true' in frame
    assert theirs.queue.empty()
    feed.stop()


async def test_a_subscriber_that_falls_behind_is_dropped_and_its_stream_ends() -> None:
    feed = InterruptFeed(clock=lambda: T0, budget=Budget(interrupt_bytes=1 << 20))
    sub = feed.subscribe("a", enforced=True)
    opened = 0
    while not sub.dropped:  # 10 KB interrupts until a mebibyte is unsent
        feed.on_state(f"t{opened}", state(f"t{opened}", Interrupt(
            id=f"i{opened}", reason="r", message="m" * 10_000)))
        opened += 1
    assert sub not in feed.subscribers
    assert 90 < opened < 120
    assert sub.queued <= QUEUE_BYTES + 11_000  # judged as each batch (one interrupt) comes
    chunks = [c async for c in stream_body(sub, keepalive_s=5)]
    assert chunks[0] == b": ready\n\n"
    assert b"".join(chunks[1:]).count(b"data: ") == opened - 1


async def test_a_burst_of_changes_in_one_batch_reaches_a_subscriber_whole() -> None:
    """The thread view applies a batch before any stream task runs: 600 interrupts
    opening at once (expiring together, say) is a burst, not a stalled client."""
    feed = InterruptFeed(clock=lambda: T0)
    sub = feed.subscribe("a", enforced=True)
    for n in range(600):
        feed.on_state(f"t{n}", state(f"t{n}", Interrupt(id=f"i{n}", reason="r")))
    assert not sub.dropped
    body = stream_body(sub, keepalive_s=5)
    assert await anext(body) == b": ready\n\n"
    assert (await anext(body)).count(b"data: ") == 600
    assert sub.queued == 0
    feed.close()
    assert [c async for c in body] == []


async def test_close_ends_every_stream_at_once() -> None:
    feed = InterruptFeed(clock=lambda: T0)
    sub = feed.subscribe("a", enforced=True)
    body = stream_body(sub, keepalive_s=60)
    assert await anext(body) == b": ready\n\n"
    feed.on_state("t", state("t", Interrupt(id="i", reason="r")))
    feed.close()
    async with asyncio.timeout(1):
        rest = [c async for c in body]
    assert b"".join(rest).count(b"data: ") == 1
    assert feed.subscribers == set()


def call(call_id: str, name: str | None, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_calls_of_a_transcript_keep_the_arguments_json_within_the_budget() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "toolCalls": [call("c1", "delete", '{"paths": ["/a"]}'),
                                            call("c2", "note", "not json")]},
        {"role": "assistant", "toolCalls": [call("c3", None, ""), {"id": 7}]}]
    found = tool_calls_of(messages)
    assert {i: c.wire() for i, c in found.items()} == {
        "c1": {"id": "c1", "name": "delete", "arguments": {"paths": ["/a"]}},
        "c2": {"id": "c2", "name": "note", "arguments": "not json"},
        "c3": {"id": "c3", "arguments": {}}}
    small = tool_calls_of(messages, argument_bytes=8)
    assert small["c1"].wire() == {"id": "c1", "name": "delete"}  # 17 bytes: not held
    assert small["c2"].wire() == {"id": "c2", "name": "note", "arguments": "not json"}


def test_a_gated_tool_call_is_asked_for_once_from_the_runs_admission() -> None:
    index = InterruptIndex()
    index.apply("t", state("t", Interrupt(id="i1", reason="r", tool_call_id="c1"),
                           Interrupt(id="i2", reason="r"), started_ms=T0 - 5000))
    index.apply("u", state("u", Interrupt(id="j", reason="r", tool_call_id="d")))  # no start
    (load,) = index.take_loads()
    assert load == Load("t", T0 - 5000 - int(SKEW.total_seconds() * 1000), frozenset({"c1"}))
    assert index.take_loads() == []
    # the same interrupt in a later state is not asked for again
    index.apply("t", state("t", Interrupt(id="i1", reason="r", tool_call_id="c1"),
                           started_ms=T0))
    assert index.take_loads() == []


def test_loads_of_one_thread_merge_until_taken() -> None:
    index = InterruptIndex()
    index.apply("t", state("t", Interrupt(id="i1", reason="r", tool_call_id="c1"),
                           started_ms=T0))
    index.apply("t", state("t", Interrupt(id="i1", reason="r", tool_call_id="c1"),
                           Interrupt(id="i2", reason="r", tool_call_id="c2"),
                           started_ms=T0 - 1000))
    (load,) = index.take_loads()
    assert (load.since_ms, load.call_ids) == (T0 - 1000 - 60_000, frozenset({"c1", "c2"}))


def test_a_learned_tool_call_is_listed_kept_and_released_with_its_interrupt() -> None:
    index = InterruptIndex()
    index.apply("t", state("t", Interrupt(id="i", reason="r", tool_call_id="c1"),
                           Interrupt(id="k", reason="r"), started_ms=T0))
    (load,) = index.take_loads()
    found = {"c1": ToolCall("c1", "delete", {"paths": ["/a"]}),
             "c9": ToolCall("c9", "other", {})}
    changes = index.learn(load, found)
    assert [(c.kind, c.entry.interrupt_id) for c in changes] == [("updated", "i")]
    assert changes[0].wire(T0)["interrupt"]["toolCall"] == {
        "id": "c1", "name": "delete", "arguments": {"paths": ["/a"]}}
    assert index.tool_calls_held == 1
    # a later state of the thread keeps it; the interrupt without a call has none
    index.apply("t", state("t", Interrupt(id="i", reason="r", tool_call_id="c1"),
                           Interrupt(id="k", reason="r"), started_ms=T0, updated_ms=T0 + 1))
    page = index.listing("a", enforced=True, filters=Filters(), now_ms=T0, offset=0, limit=9)
    assert {e.interrupt_id: e.wire(T0).get("toolCall") for e in page.items} == {
        "i": {"id": "c1", "name": "delete", "arguments": {"paths": ["/a"]}}, "k": None}
    index.apply("t", state("t"))
    assert index.tool_calls_held == 0


def test_what_is_learned_after_the_interrupt_was_answered_is_dropped() -> None:
    index = InterruptIndex()
    index.apply("t", state("t", Interrupt(id="i", reason="r", tool_call_id="c1"),
                           started_ms=T0))
    (load,) = index.take_loads()
    index.apply("t", None)
    assert index.learn(load, {"c1": ToolCall("c1", "x", {})}) == []
    assert index.tool_calls_held == 0
    assert len(index) == 0


def test_the_budget_bounds_what_is_asked_for_and_held() -> None:
    index = InterruptIndex(Budget(tool_calls=2))
    for n in range(3):
        index.apply(f"t{n}", state(f"t{n}", Interrupt(id=f"i{n}", reason="r",
                                                      tool_call_id=f"c{n}"), started_ms=T0))
    loads = index.take_loads()
    assert sorted(load.thread_id for load in loads) == ["t0", "t1"]  # the third waits for room
    index.learn(loads[0], {})  # not found: its room is free again
    index.apply("t3", state("t3", Interrupt(id="i3", reason="r", tool_call_id="c3"),
                            started_ms=T0))
    (again,) = index.take_loads()
    assert again.thread_id == "t3"
    index.learn(loads[1], {f"c{n}": ToolCall(f"c{n}", "x", {}) for n in range(4)})
    index.learn(again, {f"c{n}": ToolCall(f"c{n}", "x", {}) for n in range(4)})
    assert index.tool_calls_held == 2
    index.apply("t4", state("t4", Interrupt(id="i4", reason="r", tool_call_id="c4"),
                            started_ms=T0))
    assert index.take_loads() == []  # full: listed without its tool call
    index.apply("t1", None)
    index.apply("t5", state("t5", Interrupt(id="i5", reason="r", tool_call_id="c5"),
                            started_ms=T0))
    assert [load.thread_id for load in index.take_loads()] == ["t5"]


def test_inbox_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGUI_INBOX_TOOL_CALLS", "5")
    monkeypatch.setenv("AGUI_INBOX_TOOL_CALL_BYTES", "100")
    assert InboxSettings().budget() == Budget(5, 100)
    assert InterruptFeed(budget=InboxSettings().budget()).index.budget == Budget(5, 100)


def test_an_instance_serves_at_most_its_number_of_interrupt_streams(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGUI_INBOX_MAX_FEEDS", "2")
    feed = InterruptFeed(max_subscribers=InboxSettings().max_feeds)
    first = feed.subscribe("a", enforced=True)
    feed.subscribe("b", enforced=True)
    with pytest.raises(RetryLater) as refused:
        feed.subscribe("c", enforced=True)
    assert refused.value.code == "too_many_streams"
    assert "AGUI_INBOX_MAX_FEEDS" in refused.value.detail
    assert refused.value.response().headers["Retry-After"] == "5"
    feed.unsubscribe(first)
    feed.subscribe("c", enforced=True)


def big(thread: str, n: int, schema_bytes: int = 100_000) -> Interrupt:
    schema = {"type": "object", "properties": {
        f"f{k}": {"type": "string", "description": "d" * 100} for k in range(schema_bytes // 120)}}
    return Interrupt(id=f"i-{n}", reason="tool_approval", message="m" * 200,
                     response_schema=schema, tool_call_id=f"c-{n}", expires_at=iso(T0 + 9000))


def test_an_interrupt_past_the_budget_is_held_slim_and_listed_whole_from_the_view() -> None:
    """Every open interrupt was held whole: 4,000 of 100 kB held 540 MB beside a thread view
    on disk (found by probing). Past ``interrupt_bytes`` only what filtering, ordering and
    the expiry timer read is held; a listed or announced item is completed from the view."""
    view = {f"t{n}": big(f"t{n}", n) for n in range(50)}
    index = InterruptIndex(lookup=lambda t, i: (
        view[t].model_dump(mode="json", by_alias=True, exclude_none=True)
        if t in view and view[t].id == i else None))
    for thread, interrupt in view.items():
        index.apply(thread, state(thread, interrupt))
    held = sum(len(orjson.dumps(e.interrupt)) for e in index.entries())
    assert held < 50 * Budget().interrupt_bytes
    assert all(not e.whole for e in index.entries())
    assert listing(index, reason="tool_approval", expired=False) == [  # ties: by thread
        f"i-{n}" for n in sorted(range(50), key=lambda n: f"t{n}")]
    page = index.listing("a", enforced=True, filters=Filters(), now_ms=T0, offset=0, limit=1)
    (item,) = [index.wire(e, T0) for e in page.items]
    whole = view[item["threadId"]].model_dump(mode="json", by_alias=True, exclude_none=True)
    assert item["responseSchema"] == whole["responseSchema"]
    assert item["message"] == whole["message"]
    assert item["expiresAtMs"] == T0 + 9000
    # answered meanwhile (gone from the view): listed with what was held, nothing made up
    view.clear()
    slim = index.wire(page.items[0], T0)
    assert "responseSchema" not in slim
    assert slim["toolCallId"] == item["toolCallId"]


def test_an_interrupt_within_the_budget_is_held_whole() -> None:
    index = InterruptIndex(lookup=lambda *_: None)
    index.apply("t1", state("t1", Interrupt(id="i1", reason="input", message="short")))
    (entry,) = index.entries()
    assert entry.whole
    assert index.wire(entry, T0)["message"] == "short"


def test_a_page_of_interrupts_held_slim_reads_each_threads_state_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each slim item was completed by decoding its whole thread state with pydantic and
    dumping the interrupt: a page of 496 from 8 threads (62 each, 4 KiB of nested metadata
    apiece) took 22 s, the instance frozen (found by review). The lookup reads the state's
    record as written, once per thread for a page, and gives the interrupt as it is held."""
    from types import SimpleNamespace

    from services.consumer import interrupt_routes
    from services.consumer.threads import ThreadView
    from services.runtime.settings import KafkaSettings

    view = ThreadView(KafkaSettings())
    relay = SimpleNamespace(threads=view)
    index = InterruptIndex(lookup=interrupt_routes.open_interrupt_of(relay))  # type: ignore[arg-type]
    view.listeners.append(index.apply)
    nested = {"a": [[]] * 1370}
    for t in range(4):
        thread = f"t{t}"
        view.apply(thread.encode(), state(thread, *(
            Interrupt(id=f"{thread}-i{n}", reason="approval", metadata=nested)
            for n in range(16))))
    parsed: list[str] = []
    parse = interrupt_routes._open_interrupts
    monkeypatch.setattr(interrupt_routes, "_open_interrupts",
                        lambda t, raw: parsed.append(t) or parse(t, raw))
    page = index.listing("a", enforced=True, filters=Filters(), now_ms=T0, offset=0, limit=500)
    items = [index.wire(e, T0) for e in page.items]
    assert len(items) == 64
    assert all(not e.whole for e in page.items)
    assert sorted(parsed) == [f"t{t}" for t in range(4)]
    assert all(item["metadata"] == nested for item in items)
    assert view.raw("t0") is not None
    assert view.raw("nobody") is None
