"""The watch that closes a connection whose client reads nothing: armed only while paused."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import pytest

from services.consumer.write_idle import (
    WriteWatch,
    closed_idle,
    kernel_unsent,
    mark_closed_idle,
)

pytestmark = pytest.mark.unit

LIMIT_S = 0.01


class Transport:
    """Reports the unsent bytes from a script (the last value repeats)."""

    def __init__(self, *sizes: int) -> None:
        self.sizes = list(sizes)
        self.looks = 0
        self.closing = False

    def get_write_buffer_size(self) -> int:
        self.looks += 1
        return self.sizes.pop(0) if len(self.sizes) > 1 else self.sizes[0]

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> Any:
        return getattr(self, "sock", None) if name == "socket" else None


def watch(transport: Transport, fired: asyncio.Event) -> WriteWatch:
    loop = asyncio.get_running_loop()
    return WriteWatch(loop, transport, LIMIT_S, fired.set)  # type: ignore[arg-type]


async def test_a_paused_connection_that_makes_no_progress_is_closed() -> None:
    fired = asyncio.Event()
    transport = Transport(70_000)
    w = watch(transport, fired)
    w.paused()
    assert w.armed
    await asyncio.wait_for(fired.wait(), 10)
    assert transport.looks == 2  # when paused, and one limit later
    assert not w.armed


async def test_a_client_that_read_something_gets_another_limit() -> None:
    fired = asyncio.Event()
    transport = Transport(90_000, 80_000, 80_000, 80_000)
    w = watch(transport, fired)
    w.paused()
    await asyncio.wait_for(fired.wait(), 10)
    assert transport.looks == 4  # paused (90k), went down (80k) and re-armed (80k), stalled


async def test_writes_that_resume_disarm_the_watch() -> None:
    fired = asyncio.Event()
    transport = Transport(70_000)
    w = watch(transport, fired)
    w.paused()
    w.paused()  # already armed: one timer
    w.resumed()
    assert not w.armed
    await asyncio.sleep(LIMIT_S * 5)
    assert not fired.is_set()
    assert transport.looks == 1


async def test_a_connection_already_closing_is_left_alone() -> None:
    fired = asyncio.Event()
    transport = Transport(70_000)
    w = watch(transport, fired)
    w.paused()
    transport.closing = True
    await asyncio.sleep(LIMIT_S * 5)
    assert not fired.is_set()
    assert not w.armed


@pytest.mark.parametrize("scope", [{}, {"extensions": None}, {"extensions": {"x": {}}}])
def test_the_scope_tells_an_idle_close_from_the_clients_own(scope: dict[str, Any]) -> None:
    assert not closed_idle(scope)
    mark_closed_idle(scope)
    assert closed_idle(scope)


async def test_a_client_reading_what_the_kernel_holds_is_progress_though_the_transport_is_flat(
        ) -> None:
    """A real loopback connection: the kernel holds what the client has not read yet; the
    transport's own count (scripted, flat) never moves."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    client.setblocking(False)
    try:
        server.setblocking(False)
        sent = 0
        with contextlib.suppress(BlockingIOError):
            while sent < 8 << 20:
                sent += server.send(b"x" * 65_536)
        held = kernel_unsent(_Sock(server))
        assert held > 0
        fired = asyncio.Event()
        transport = Transport(70_000)
        transport.sock = server  # type: ignore[attr-defined]
        w = WriteWatch(asyncio.get_running_loop(), transport,  # type: ignore[arg-type]
                       3600, fired.set)  # the looks are taken by hand, not by the clock
        w.paused()
        client.recv(1 << 20)  # the client reads some
        async with asyncio.timeout(10):
            while kernel_unsent(_Sock(server)) >= held:
                await asyncio.sleep(0.01)
        w._look()
        assert not fired.is_set()  # progress: another limit
        assert w.armed
        w._look()  # and nothing read since
        assert fired.is_set()
        w.stop()
    finally:
        for sock in (client, server, listener):
            sock.close()


class _Sock:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None
