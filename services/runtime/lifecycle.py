"""Graceful shutdown: run a service until SIGINT/SIGTERM, then let it drain.

``run_until_signalled(main)`` gives ``main`` an ``asyncio.Event`` that is set
on the first signal; the service stops taking new work, finishes or hands
back what it holds, and returns. A second signal cancels it outright.

Every service runs on uvloop (libuv under asyncio's interface): the services
spend most of their time in the event loop (aiokafka's requests, uvicorn's
connections), and uvloop roughly halves what that loop costs per callback.
The garbage collector is set for serving first (``collector``), and a thread
beside the loop logs where the loop is when something blocks it (``stalls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable

import uvloop

from services.runtime.collector import CollectorSettings, settle_for_serving
from services.runtime.stalls import LoopWatch


async def _serve(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and task is not None:
            task.cancel()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    watch = LoopWatch()
    watch.start()
    try:
        await main(stop)
    finally:
        watch.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def run_until_signalled(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``main(stop)`` in a fresh uvloop event loop until it returns."""
    settle_for_serving(CollectorSettings())
    with (
        contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError),
        asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner,
    ):
        runner.run(_serve(main))
