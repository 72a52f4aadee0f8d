"""The inbox feed's bursts of large interrupts: bounded for a client that reads nothing,
whole for one that reads.

Found by probing: ``QUEUE_BYTES`` (1 MiB) was judged only when a *new* batch came; a
mass expiry is one batch, so a stalled ``/interrupts/stream`` client (a laptop lid
closed, a proxy that buffers) was handed every frame of it: 400 interrupts of 50 kB
expiring at one instant queued 20 MB for it, held until its connection went. What a
stalled client held grew with the burst (interrupts x their size), not with
configuration.
"""

from __future__ import annotations

import asyncio

import pytest
from ag_ui.core import Interrupt
from test_consumer_interrupts import T0, iso, state

from services.consumer.inbox_feed import QUEUE_BYTES, InterruptFeed, Subscriber, stream_body
from services.consumer.interrupts import Budget

pytestmark = pytest.mark.unit

MESSAGE = 50_000
"""A large interrupt's message: its frame is about this size."""


def expiring_together(count: int) -> tuple[list[int], InterruptFeed]:
    """A feed holding ``count`` large interrupts that lapse at one instant, and its clock."""
    now = [T0]
    feed = InterruptFeed(clock=lambda: now[0], budget=Budget(interrupt_bytes=1 << 20))
    for n in range(count):
        feed.on_state(f"t{n}", state(f"t{n}", Interrupt(
            id=f"i{n}", reason="r", message="m" * MESSAGE, expires_at=iso(T0 + 60_000))))
    return now, feed


def test_a_mass_expiry_queues_a_bounded_amount_for_a_client_that_reads_nothing() -> None:
    now, feed = expiring_together(800)  # a 40 MB burst
    # a client subscribes (it reads ': ready' and then nothing more), then all 800 lapse
    stalled = feed.subscribe("a", enforced=True)
    now[0] = T0 + 60_000
    feed.fire()
    assert stalled.queued <= 16 * QUEUE_BYTES, (  # BURST_BYTES
        f"{stalled.queued / 1e6:.1f} MB queued for a client that reads nothing "
        f"(dropped: {stalled.dropped})")
    assert stalled.dropped
    assert stalled not in feed.subscribers


async def test_a_client_reading_a_burst_of_large_interrupts_gets_all_of_it() -> None:
    """The same 40 MB burst to a client that reads between turns of the loop: it gets
    every change, each turn announcing a slice it drains."""
    now, feed = expiring_together(800)
    sub = feed.subscribe("a", enforced=True)
    most = 0

    async def read(sub: Subscriber) -> int:
        nonlocal most
        changes = 0
        async for chunk in stream_body(sub, keepalive_s=5):
            changes += chunk.count(b'data: {"type":"expired"')
            most = max(most, len(chunk))
        return changes
    reader = asyncio.create_task(read(sub))
    await asyncio.sleep(0)
    now[0] = T0 + 60_000
    feed.fire()
    await feed.flushed()
    await asyncio.sleep(0)
    dropped = sub.dropped
    feed.close()
    assert not dropped
    assert await reader == 800
    assert most <= 4 * QUEUE_BYTES + 2 * MESSAGE  # a slice (SLICE_BYTES) and one frame
