"""The consumer service's HTTP/1.1 protocol: the bounded one (``runtime.http_protocol``)
with the rules of a service that answers browsers, forwards and streams.

Besides the head's size, count and clocks and the one-request-at-a-time parse
of every service's protocol, per connection:

- the ``Host`` names answered (``hosts``: on loopback, only loopback's and
  the instance's own, against DNS rebinding): any other, ``421
  unknown_host``; and the ``Host`` lines (RFC 9112 section 3.2): two, or none
  on an HTTP/1.1 request, ``400 invalid_host``;
- a head that another instance forwarded (it carries ``agui-forwarded-by``)
  may be ``FORWARDED_SLACK`` bytes longer: the forward adds headers of its
  own to a head the first instance held to the limit, and what is served
  there must be served here;
- a clock for a client that reads nothing while a response waits to write to
  it (``AGUI_STREAM_IDLE_S``, ``write_idle``): the connection is closed. For
  a forwarded request the clock runs ``FORWARDED_IDLE_FACTOR`` times as long:
  the instance that forwarded it reads from here only as fast as its own
  client takes the bytes, and watches that client with the same clock (a slow
  client through a forward was cut here, by the owner, for the forwarding
  instance's bursts of reading), but the header that marks a request
  forwarded can come from any client, and one that wrote it and read nothing
  held its stream, connection and log reader for ever;
- a kernel send buffer held to ``SEND_BUFFER``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from services.consumer.forward import FORWARDED_BY
from services.consumer.hosts import allowed_hosts, answered, host_lines_fault
from services.consumer.settings import ConsumerSettings
from services.consumer.write_idle import WriteWatch, mark_closed_idle, offer_connection
from services.runtime.http_protocol import (
    HEADER_LINE_EXTRA,
    REQUEST_LINE_EXTRA,
    BoundedHttpToolsProtocol,
    HeadLimits,
    Refusal,
    Refused,
)

__all__ = ["HEADER_LINE_EXTRA", "REQUEST_LINE_EXTRA", "ConsumerHttpProtocol", "HttpLimits",
           "bounded_protocol"]
"""The head's measures are re-exported: tests size heads to the consumer's limit."""

FORWARDED_SLACK = 1024
"""Bytes a forwarded head may exceed the limit by: the lines the forward adds to the
client's (``Host``, ``Connection``, ``Content-Length`` and the ``agui-*`` headers, two of
them advertised URLs of at most 255 characters) come to under 700 bytes."""
FORWARDED_IDLE_FACTOR = 3
"""How many ``AGUI_STREAM_IDLE_S`` a forwarded response may wait to write: the forwarding
instance cuts a client that reads nothing within two (a watch that saw progress at its
last look looks again one later), and then closes its connection here."""
SEND_BUFFER = 256 * 1024
"""Bytes the kernel may hold for one client (``SO_SNDBUF``; Linux doubles it for its own
bookkeeping). Left to autotuning it grows to 4 MiB for a slow client: a run's stream or
replay then ran megabytes ahead of what its client had read, and a log reader held for
it could not be handed on (``log_tail``) until the client had drained them; with ten
thousand streams, gigabytes of kernel memory. 256 KiB keeps a stream fed across a 20 ms
path at 12 MB/s, far more than a run streams."""
FORWARDED_NAME = FORWARDED_BY.encode()


@dataclass(frozen=True, slots=True)
class HttpLimits(HeadLimits):
    """The head's limits, how long a response may wait for a client that reads nothing,
    and the ``Host`` names answered."""

    write_idle_s: float = 60.0
    allowed_hosts: frozenset[bytes] | None = None
    """``Host`` names answered (None: any; ``hosts``)."""

    @classmethod
    def of(cls, settings: ConsumerSettings) -> HttpLimits:
        return cls(max_header_bytes=settings.http_max_header_bytes,
                   max_headers=settings.http_max_headers,
                   header_timeout_s=settings.http_header_timeout_s,
                   body_timeout_s=settings.http_body_timeout_s, settings_named=True,
                   write_idle_s=settings.stream_idle_s,
                   allowed_hosts=allowed_hosts(settings.allowed_hosts, settings.http_host,
                                               settings.advertised_url))


def bound_send_buffer(transport: asyncio.BaseTransport) -> None:
    """Hold the kernel's send buffer of a connection to ``SEND_BUFFER`` (it would grow
    to ``tcp_wmem``'s 4 MiB for a client that reads slowly)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)


class ConsumerHttpProtocol(BoundedHttpToolsProtocol):
    """The bounded protocol with the module docstring's rules."""

    limits: ClassVar[HttpLimits] = HttpLimits()
    max_slack: ClassVar[int] = FORWARDED_SLACK
    on_write_idle: ClassVar[tuple[Callable[[], None], ...]] = ()
    """Hooks run when a connection is closed because its client read nothing (a metric)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._forwarded = False
        self._host_lines = 0
        self._write_watch = WriteWatch(self.loop, transport, self.limits.write_idle_s,
                                       self._write_idle)
        bound_send_buffer(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._write_watch.stop()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        idle_s = self.limits.write_idle_s
        # the instance that forwarded it watches its own client; FORWARDED_IDLE_FACTOR
        # times as long here still ends a stream whose "forwarder" is a client that
        # wrote the header itself and reads nothing
        self._write_watch.limit_s = idle_s * FORWARDED_IDLE_FACTOR if self._forwarded \
            else idle_s
        self._write_watch.paused()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._write_watch.resumed()

    def _write_idle(self) -> None:
        """The client read nothing for ``write_idle_s``: close the connection now."""
        if self.cycle is not None:
            mark_closed_idle(cast("dict[str, Any]", self.cycle.scope))
        for hook in self.on_write_idle:
            hook()
        self.transport.abort()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._forwarded = False
        self._host_lines = 0

    def _check_header(self, name: bytes, value: bytes) -> None:
        if len(name) == len(FORWARDED_NAME) and name.lower() == FORWARDED_NAME:
            self._forwarded = True
        if len(name) != 4 or name.lower() != b"host":
            return
        self._host_lines += 1
        if self._host_lines > 1:
            self._check_head()
        hosts = self.limits.allowed_hosts
        if hosts is not None and not answered(value, hosts):
            self._refuse(Refusal(421, "Misdirected request", "unknown_host",
                                 "this instance does not answer requests for that host "
                                 "name (AGUI_ALLOWED_HOSTS)"))
            raise Refused

    def _check_head(self) -> None:
        fault = host_lines_fault(self.parser.get_http_version(), self._host_lines)
        if fault is not None:
            self._refuse(Refusal(400, "Invalid input", "invalid_host", fault))
            raise Refused

    def _head_slack(self) -> int:
        return FORWARDED_SLACK if self._forwarded else 0

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        offer_connection(cast("dict[str, Any]", self.scope), self._abort,
                         self._write_watch.unsent)

    def _abort(self) -> None:
        """Abort the connection as its client's: the response's cycle is marked
        disconnected first, or uvicorn, seeing the app return before the transport's
        loss is reported, logs an ERROR for every response broken off on purpose."""
        cycle = self.cycle
        if cycle is not None:
            cycle.disconnected = True
        self.transport.abort()


def bounded_protocol(limits: HttpLimits, on_write_idle: Callable[[], None] | None = None
                     ) -> type[ConsumerHttpProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to ``limits``."""
    return type("ConsumerHttpProtocol", (ConsumerHttpProtocol,),
                {"limits": limits,
                 "on_write_idle": (on_write_idle,) if on_write_idle is not None else ()})
