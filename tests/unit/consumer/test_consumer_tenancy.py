"""Thread ownership in the consumer service: who may read and run on which thread.

The rules are pure (``may_read``, ``may_run``, ``rejection``); ``Tenancy``
is exercised over a real ``ThreadView`` and ``FanOut`` fed by hand (neither
is started: no Kafka is involved in deciding, only in filling them).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from contracts import Decision, ThreadState, encode
from services.consumer.metrics import ConsumerMetrics
from services.consumer.problems import NotFound, Rejected, Unavailable
from services.consumer.streams import FanOut
from services.consumer.tenancy import Tenancy, may_read, may_run, rejection, unknown_thread
from services.consumer.threads import ThreadView
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

A, B = "tenant-a", "tenant-b"


def state(owner: str | None, *, ran: bool = True, thread: str = "t1") -> ThreadState:
    return ThreadState(thread_id=thread, principal=owner, run_id="r1" if ran else None)


@pytest.mark.parametrize("enforced", [True, False])
def test_an_owned_thread_is_its_owners_only(enforced: bool) -> None:
    owned = state(A)
    assert may_read(owned, A, enforced=enforced)
    assert may_run(owned, A, enforced=enforced)
    for other in (B, "anonymous", "tenant-a "):
        assert not may_read(owned, other, enforced=enforced)
        assert not may_run(owned, other, enforced=enforced)


def test_an_unowned_thread_is_open_only_while_authentication_is_off() -> None:
    unowned = state(None)
    assert may_read(unowned, A, enforced=False)
    assert may_run(unowned, A, enforced=False)
    assert not may_read(unowned, A, enforced=True)
    assert not may_run(unowned, A, enforced=True)


@pytest.mark.parametrize("enforced", [True, False])
def test_a_new_thread_or_one_that_never_ran_may_be_started_by_anyone(enforced: bool) -> None:
    assert may_run(None, A, enforced=enforced)
    assert may_run(state(None, ran=False), B, enforced=enforced)
    assert not may_read(state(None, ran=False), B, enforced=True)


def test_the_gatekeeper_backstop_reads_as_an_unknown_thread() -> None:
    def decided(code: str) -> Decision:
        return Decision(request_id="q", thread_id="t1", verdict="rejected",
                        code=code,  # type: ignore[arg-type]
                        message="thread 't1' belongs to another principal",
                        decided_at=datetime.now(UTC))

    hidden = rejection(decided("key_mismatch"), "t1")
    assert isinstance(hidden, NotFound)
    assert hidden.body() == unknown_thread("t1").body()
    assert "principal" not in hidden.detail
    busy = rejection(decided("thread_busy"), "t1")
    assert isinstance(busy, Rejected)
    assert busy.status == 409


def tenancy(*, enforced: bool, caught_up: bool = True,
            settle_s: float = 0.5) -> tuple[Tenancy, ThreadView, FanOut]:
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:9", topic_prefix="unit")
    threads = ThreadView(kafka)
    fanout = FanOut(kafka, ConsumerMetrics(), max_streams=4, stream_queue=16, index_size=16)
    if caught_up:
        threads.caught_up.set()
    return Tenancy(threads, fanout, enforced=enforced, settle_s=settle_s), threads, fanout


def put(threads: ThreadView, owned: ThreadState) -> None:
    threads.apply(owned.thread_id.encode(), encode(owned))


async def test_readable_gives_the_owner_its_thread_and_others_the_404() -> None:
    checks, threads, _ = tenancy(enforced=True)
    put(threads, state(A))
    assert (await checks.readable("t1", A)) == state(A)
    with pytest.raises(NotFound) as err:
        await checks.readable("t1", B)
    assert err.value.body() == unknown_thread("t1").body()
    checks.check_run("t1", A)
    with pytest.raises(NotFound):
        checks.check_run("t1", B)
    checks.check_run("t-new", B)


async def test_with_authentication_an_unknown_owner_is_never_assumed() -> None:
    checks, threads, _ = tenancy(enforced=True)
    put(threads, state(None))
    with pytest.raises(NotFound):
        await checks.readable("t1", A)
    with pytest.raises(NotFound):
        await checks.readable("t-missing", A)
    early, _, _ = tenancy(enforced=True, caught_up=False)
    with pytest.raises(Unavailable) as err:
        await early.readable("t-missing", A)
    assert err.value.code == "not_ready"


async def test_without_authentication_unknown_and_unowned_threads_pass_through() -> None:
    checks, threads, _ = tenancy(enforced=False)
    assert await checks.readable("t-missing", "anonymous") is None
    put(threads, state(None))
    assert await checks.readable("t1", "anonymous") == state(None)
    put(threads, state(A, thread="t2"))
    with pytest.raises(NotFound):
        await checks.readable("t2", "anonymous")


async def test_a_run_seen_admitted_waits_for_its_thread_state() -> None:
    checks, threads, fanout = tenancy(enforced=True, settle_s=5.0)
    fanout.admitted.put(("t1", "r1"), 1_796_284_800_000)

    async def later() -> None:
        await asyncio.sleep(0.1)
        put(threads, state(A))

    writer = asyncio.create_task(later())
    assert (await checks.readable("t1", A, "r1")) == state(A)
    await writer
    quick, _, fanout2 = tenancy(enforced=True, settle_s=0.05)
    fanout2.admitted.put(("t9", "r1"), 1_796_284_800_000)
    with pytest.raises(NotFound):  # never shows up: no owner, no access
        await quick.readable("t9", A, "r1")


def test_resume_entries_on_a_thread_never_seen_read_as_an_unknown_thread() -> None:
    nothing_open = Decision(request_id="q", thread_id="t1", verdict="rejected",
                            code="unknown_interrupt", interrupt_ids=["i1"],
                            message="resume names 'i1' but nothing is open",
                            decided_at=datetime.now(UTC))
    hidden = rejection(nothing_open, "t1", unseen=True)
    assert hidden.body() == unknown_thread("t1").body()
    seen = rejection(nothing_open, "t1")
    assert (seen.status, seen.code, seen.interrupt_ids) == (422, "unknown_interrupt", ["i1"])


def test_check_run_says_whether_the_thread_was_seen_running() -> None:
    guard, threads, _ = tenancy(enforced=True)
    assert guard.check_run("t1", A) is True  # no state at all
    threads.apply(b"t1", encode(state(None, ran=False)))
    assert guard.check_run("t1", A) is True  # only rejections so far
    threads.apply(b"t1", encode(state(A)))
    assert guard.check_run("t1", A) is False
    with pytest.raises(NotFound):
        guard.check_run("t1", B)
