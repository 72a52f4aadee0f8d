"""Closing a connection whose client stopped reading (``AGUI_STREAM_IDLE_S``).

A client that reads slowly is never cut (``overflow``: its stream continues
from the log at its pace), but one that reads *nothing* would hold its
connection, its stream slot and perhaps a log reader for ever. Whether a
client reads is seen where the bytes go: the transport pauses the protocol's
writes when the bytes it could not hand to the kernel pass its high-water
mark, and resumes them once they drop below the low one. ``WriteWatch`` arms
one timer when writes pause (none while they flow, so a healthy stream costs
nothing) and, when it fires with writes still paused, compares the unsent
bytes with those at the previous look: fewer means the client read
something (the watch looks again one limit later), as many or more means it
read nothing for the whole limit (``overflow.stalled``) and the connection is
closed at once (``abort``: a plain close would wait, for ever, to flush).
The unsent bytes are the transport's and the kernel's (``SIOCOUTQ``: sent or
not, not yet acknowledged by the client): the kernel takes more from the
transport only once a good part of its send buffer is free, megabytes on a
connection that once ran fast, so between two such wake-ups the transport's
own count stays flat however steadily a slow client reads, while the
kernel's falls with every read.

The request's scope is marked (``IDLE_CLOSED``) before the connection goes,
so the response can tell this disconnect from the client's own: a stream cut
for idleness is truncated, never finished, and never cancels its run; the
client continues with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import fcntl
import struct
import termios
from collections.abc import Callable, MutableMapping
from typing import Any

from services.consumer.overflow import stalled

IDLE_CLOSED = "agui.idle_closed"
"""Key of the request scope's ``extensions`` set when the connection was closed idle."""


def closed_idle(scope: MutableMapping[str, Any]) -> bool:
    """Whether ``scope``'s connection was closed because its client read nothing."""
    return IDLE_CLOSED in (scope.get("extensions") or {})


def mark_closed_idle(scope: MutableMapping[str, Any]) -> None:
    extensions = scope.get("extensions")
    if extensions is None:
        extensions = scope["extensions"] = {}
    extensions[IDLE_CLOSED] = {}


CONNECTION = "agui.connection"
"""Key of the request scope's ``extensions`` holding what the server's protocol offers of
its connection: ``abort`` (how a response whose source broke off ends its client's
connection too, so the client sees a broken body rather than a whole one) and
``unsent`` (the bytes written but not yet taken by the client: how a log reader tells a
client that reads slowly from one that reads nothing, ``log_tail``)."""


def offer_connection(scope: MutableMapping[str, Any], abort: Callable[[], None],
                     unsent: Callable[[], int]) -> None:
    extensions = scope.get("extensions")
    if extensions is None:
        extensions = scope["extensions"] = {}
    extensions[CONNECTION] = {"abort": abort, "unsent": unsent}


def abort_connection(scope: MutableMapping[str, Any]) -> bool:
    """Abort ``scope``'s connection (no end of body is written); False when the server
    offers no way to."""
    offered = (scope.get("extensions") or {}).get(CONNECTION)
    if offered is None:
        return False
    offered["abort"]()
    return True


def unsent_of(scope: MutableMapping[str, Any]) -> Callable[[], int] | None:
    """How to read the bytes ``scope``'s client has not taken yet (None: not offered)."""
    offered = (scope.get("extensions") or {}).get(CONNECTION)
    return None if offered is None else offered["unsent"]


class WriteWatch:
    """One connection's watch on its paused writes (see the module docstring)."""

    __slots__ = ("_buffered", "_loop", "_on_idle", "_timer", "_transport", "limit_s")

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.WriteTransport,
                 limit_s: float, on_idle: Callable[[], None]) -> None:
        self._loop = loop
        self._transport = transport
        self.limit_s = limit_s
        self._on_idle = on_idle
        self._timer: asyncio.TimerHandle | None = None
        self._buffered = 0

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def paused(self) -> None:
        """The transport paused writing: start the clock (if it is not running)."""
        if self._timer is None:
            self._arm()

    def resumed(self) -> None:
        """Writes flow again: stop the clock."""
        self.stop()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        self._buffered = self.unsent()
        self._timer = self._loop.call_later(self.limit_s, self._look)

    def _look(self) -> None:
        self._timer = None
        if self._transport.is_closing():
            return
        if stalled(self._buffered, self.unsent()):
            self._on_idle()
        else:
            self._arm()

    def unsent(self) -> int:
        """Bytes written to the connection that its client has not taken yet."""
        return self._transport.get_write_buffer_size() + kernel_unsent(self._transport)


def kernel_unsent(transport: asyncio.BaseTransport) -> int:
    """The bytes the kernel holds for the client that it has not acknowledged
    (``SIOCOUTQ``, Linux's ``TIOCOUTQ`` on a socket); 0 where that cannot be read."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return int(struct.unpack("i", raw)[0])
