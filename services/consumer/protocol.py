"""The HTTP/1.1 protocol the service is served with: uvicorn's httptools one, bounded.

uvicorn's ``HttpToolsProtocol`` puts no limit on a request head and no clock
on a slow client: a head of 64 headers of 1 MiB each is parsed, kept and
handed to the app, and a head or a body that never finishes holds its
connection forever. ``BoundedHttpToolsProtocol`` keeps uvicorn's parser and
request cycle and adds, per connection:

- the ``Host`` names answered (``hosts``: on loopback, only loopback's and
  the instance's own, against DNS rebinding): any other, ``421
  unknown_host``;
- a size and a count for the head (``AGUI_HTTP_MAX_HEADER_BYTES``,
  ``AGUI_HTTP_MAX_HEADERS``): the parser's callbacks measure the request
  line and each header line as it completes (``name: value`` and CRLF, the
  usual form; the blank line ending the head is not counted), and the bytes
  received while a head is incomplete are counted as they arrive, so a single
  header that never ends is refused before it can grow the process. Over
  either limit: ``431 headers_too_large``. A head that another instance
  forwarded (it carries ``agui-forwarded-by``) may be ``FORWARDED_SLACK``
  bytes longer: the forward adds headers of its own to a head the first
  instance held to the limit, and what is served there must be served here;
- a clock for the head (``AGUI_HTTP_HEADER_TIMEOUT_S``, from a request's
  first byte until its head is complete) and one for the body
  (``AGUI_HTTP_BODY_TIMEOUT_S``, from the complete head until the complete
  body; it waits while the server itself has paused reading): late, ``408
  request_timeout``;
- an idle clock from the moment a connection opens (uvicorn arms its
  keep-alive timeout only after a response), and no keep-alive timeout while
  a request is arriving (the head clock is the one that counts then);
- a clock for a client that reads nothing while a response waits to write to
  it (``AGUI_STREAM_IDLE_S``, ``write_idle``): the connection is closed. For
  a forwarded request the clock runs ``FORWARDED_IDLE_FACTOR`` times as long:
  the instance that forwarded it reads from here only as fast as its own
  client takes the bytes, and watches that client with the same clock (a slow
  client through a forward was cut here, by the owner, for the forwarding
  instance's bursts of reading), but the header that marks a request
  forwarded can come from any client, and one that wrote it and read nothing
  held its stream, connection and log reader for ever.

Pipelined requests are not parsed ahead: while a request's response is not
complete, the bytes that arrive after it are held unparsed, and reading is
paused once more than a head's worth (``held_bytes``) is held; they are
parsed when the response completes. uvicorn parsed every request of a read
and queued a request cycle (~3 KiB) for each: 256 KiB of ``GET /healthz`` a
client never read grew the process by 18 MiB per connection. So a connection
has one request cycle at a time, a lost connection reaches the request being
answered (uvicorn marked only the last one parsed, a queued one), and a
refusal is about the request being answered or the next one after it, in
order (one of a pipelined request was read as the answer to the POST before
it). To stop at a message's end the parser is fed a head up to its blank
line, a body by its ``Content-Length`` or, chunked, up to a blank line.

A refusal is written by the protocol itself, as a problem document (the
app never sees the request; when the app has begun answering the request
the connection is only closed), then the connection stops reading
for good: what the client still sends is discarded unparsed for ``LINGER_S``
(so it can read the answer rather than a reset) and the connection closes.
Timers are only armed when a request is still incomplete after the bytes at
hand are parsed, so a request that arrives in one read costs no timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from services.consumer.forward import FORWARDED_BY
from services.consumer.hosts import allowed_hosts, answered
from services.consumer.problems import (
    PROBLEM_TYPE,
    HeadersTooLarge,
    InvalidInput,
    Misdirected,
    Problem,
    RequestTimeout,
)
from services.consumer.settings import ConsumerSettings
from services.consumer.write_idle import WriteWatch, mark_closed_idle, offer_connection

REQUEST_LINE_EXTRA = len(b"  HTTP/1.1\r\n")
"""Bytes of a request line besides its method and URL."""
HEADER_LINE_EXTRA = len(b": \r\n")
"""Bytes of a header line besides its name and value."""
RAW_SLACK = 1024
"""Bytes of an incomplete head allowed past the limit before the raw count refuses it
(room for the whitespace and line ends the measured count leaves out)."""
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
BLANK_LINE = b"\r\n\r\n"
"""What ends a head, and a chunked body (the last chunk's line, its trailers and this)."""
LINGER_S = 2.0
"""How long a refused connection keeps reading (and discarding) before it closes."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one request head may be, and how long a head and a body may take."""

    max_header_bytes: int = 16_384
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    write_idle_s: float = 60.0
    allowed_hosts: frozenset[bytes] | None = None
    """``Host`` names answered (None: any; ``hosts``)."""

    @property
    def held_bytes(self) -> int:
        """Unparsed bytes held behind a response under way before reading pauses: the
        largest head (``RAW_SLACK`` and ``FORWARDED_SLACK`` included)."""
        return self.max_header_bytes + RAW_SLACK + FORWARDED_SLACK

    @classmethod
    def of(cls, settings: ConsumerSettings) -> HttpLimits:
        return cls(settings.http_max_header_bytes, settings.http_max_headers,
                   settings.http_header_timeout_s, settings.http_body_timeout_s,
                   settings.stream_idle_s,
                   allowed_hosts(settings.allowed_hosts, settings.http_host,
                                 settings.advertised_url))


class _Refused(Exception):  # noqa: N818 - a signal, not an error
    """Raised from a parser callback once the protocol has answered: stops the parse."""


def bound_send_buffer(transport: asyncio.BaseTransport) -> None:
    """Hold the kernel's send buffer of a connection to ``SEND_BUFFER`` (it would grow
    to ``tcp_wmem``'s 4 MiB for a client that reads slowly)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)


class HeldFlow(FlowControl):
    """uvicorn's flow control, but reading stays paused while ``held()``: a request
    cycle's ``receive`` resumes reading each time it is called."""

    def __init__(self, transport: asyncio.Transport, held: Callable[[], bool]) -> None:
        super().__init__(transport)
        self._held = held

    def resume_reading(self) -> None:
        if not self._held():
            super().resume_reading()


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the module docstring's limits."""

    limits: ClassVar[HttpLimits] = HttpLimits()
    on_write_idle: ClassVar[tuple[Callable[[], None], ...]] = ()
    """Hooks run when a connection is closed because its client read nothing (a metric)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._in_head = True
        """No head is complete since the last message (or the connection) began."""
        self._receiving = False
        """A message has begun and is not complete."""
        self._raw_head = 0
        self._head_bytes = 0
        self._header_count = 0
        self._forwarded = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._answered = False
        self._unparsed = bytearray()
        """Bytes received and not yet fed to the parser (see the module docstring)."""
        self._fed_tail = b""
        """The last bytes fed to the parser of the current head or chunked body (a blank
        line may straddle two reads)."""
        self._body_left: int | None = 0
        """``Content-Length`` bytes of the current message not yet fed (None: chunked)."""
        self._held_paused = False
        """Reading is paused because ``_unparsed`` holds enough."""
        self._write_watch = WriteWatch(self.loop, transport, self.limits.write_idle_s,
                                       self._write_idle)
        bound_send_buffer(transport)
        super().connection_made(transport)
        self.flow = HeldFlow(transport, self._holding)
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._unparsed.clear()
        self._stop_timers()
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

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return
        self._unset_keepalive_if_required()
        self._unparsed += data
        self._parse()

    def _parse(self) -> None:
        """Feed the parser what it may parse now (not past the end of a message whose
        response is under way), then pause or resume reading and arm the clocks."""
        while self._unparsed and not self._answered and not self.transport.is_closing():
            cycle = self.cycle
            if not self._receiving and cycle is not None and not cycle.response_complete:
                break  # the next request waits for this response
            size = self._next_piece()
            piece = bytes(self._unparsed[:size])
            del self._unparsed[:size]
            if self._in_head:
                self._raw_head += size
            if self._body_left is not None and not self._in_head:
                self._body_left -= size
            else:
                self._fed_tail = (self._fed_tail + piece)[-3:]
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserUpgrade:
                self._unsupported_upgrade_warning()
            except httptools.HttpParserError:
                if not self._answered:
                    self.send_400_response("the request is not valid HTTP/1.1")
                return
        if self._answered or self.transport.is_closing():
            return
        if self._holding():
            self._held_paused = True
            self.flow.pause_reading()
        elif self._held_paused:  # what was held is parsed: read on
            self._held_paused = False
            self.flow.resume_reading()
        limits = self.limits
        if self._in_head:
            if self._raw_head > limits.max_header_bytes + RAW_SLACK + FORWARDED_SLACK:
                self._refuse(self._too_large())
            elif self._head_timer is None and (self._raw_head or self._receiving):
                self._head_timer = self.loop.call_later(limits.header_timeout_s,
                                                        self._head_timed_out)
        elif self._receiving and self._body_timer is None:
            self._body_timer = self.loop.call_later(limits.body_timeout_s, self._body_timed_out)

    def _next_piece(self) -> int:
        """How many held bytes the parser may take at once without passing the end of
        the message it is in (or of the next one, when between messages)."""
        held = self._unparsed
        if not self._in_head and self._body_left is not None:
            if self._body_left > 0:
                return min(len(held), self._body_left)
            return len(held)  # the parser knows better than the count: let it say
        tail = self._fed_tail
        at = (tail + held[:3]).find(BLANK_LINE)
        if at >= 0:
            return at + len(BLANK_LINE) - len(tail)
        at = held.find(BLANK_LINE)
        return at + len(BLANK_LINE) if at >= 0 else len(held)

    def _holding(self) -> bool:
        """Whether more unparsed bytes are held than reading may go on with."""
        return len(self._unparsed) > self.limits.held_bytes

    def send_400_response(self, msg: str) -> None:
        self._refuse(InvalidInput("invalid_request", msg))

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._receiving = True
        self._head_bytes = 0
        self._header_count = 0
        self._forwarded = False
        self._body_left = 0
        self._fed_tail = b""

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes + REQUEST_LINE_EXTRA > self.limits.max_header_bytes:
            self._refuse(self._too_large())
            raise _Refused
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_bytes += len(name) + len(value) + HEADER_LINE_EXTRA
        if len(name) == len(FORWARDED_NAME) and name.lower() == FORWARDED_NAME:
            self._forwarded = True
        self._frame_body(name, value)
        limits = self.limits
        if (limits.allowed_hosts is not None and len(name) == 4 and name.lower() == b"host"
                and not answered(value, limits.allowed_hosts)):
            self._refuse(Misdirected("unknown_host", "this instance does not answer requests "
                                     "for that host name (AGUI_ALLOWED_HOSTS)"))
            raise _Refused
        # past anything any head may be: refused now; the exact byte limit, which depends
        # on whether the head was forwarded, is applied once the head is complete
        if (self._header_count > limits.max_headers
                or self._head_bytes + REQUEST_LINE_EXTRA > limits.max_header_bytes
                + FORWARDED_SLACK):
            self._refuse(self._too_large())
            raise _Refused
        super().on_header(name, value)

    def _frame_body(self, name: bytes, value: bytes) -> None:
        """Note how the body ends: by ``Content-Length`` or chunked (the parser refuses
        a head with both, or with a bad length)."""
        lowered = name.lower()
        if lowered == b"content-length" and value.strip().isdigit():
            if self._body_left is not None:
                self._body_left = int(value)
        elif lowered == b"transfer-encoding":
            self._body_left = None

    def on_headers_complete(self) -> None:
        size = self._head_bytes + len(self.parser.get_method()) + REQUEST_LINE_EXTRA
        if size > self.limits.max_header_bytes + (FORWARDED_SLACK if self._forwarded else 0):
            self._refuse(self._too_large())
            raise _Refused
        self._in_head = False
        self._raw_head = 0
        self._fed_tail = b""
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        offer_connection(cast("dict[str, Any]", self.scope), self.transport.abort,
                         self._write_watch.unsent)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._receiving = False
        self._in_head = True
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or self.parser is None:
            return
        self._parse()  # the next request, held while this one was answered
        cycle = self.cycle
        if self._receiving or self._raw_head or (cycle is not None
                                                 and not cycle.response_complete):
            self._unset_keepalive_if_required()  # the next request is arriving or answered

    # Refusals
    def _too_large(self) -> HeadersTooLarge:
        limits = self.limits
        return HeadersTooLarge(
            "headers_too_large",
            f"the request head exceeds {limits.max_header_bytes} bytes or "
            f"{limits.max_headers} header fields (AGUI_HTTP_MAX_HEADER_BYTES, "
            "AGUI_HTTP_MAX_HEADERS)")

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._refuse(RequestTimeout(
            "request_timeout", f"the request head did not arrive within "
            f"{self.limits.header_timeout_s:g} s (AGUI_HTTP_HEADER_TIMEOUT_S)"))

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self.flow.read_paused:  # the server is not reading: not the client's delay
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s,
                                                    self._body_timed_out)
            return
        self._refuse(RequestTimeout(
            "request_timeout", f"the request body did not arrive within "
            f"{self.limits.body_timeout_s:g} s (AGUI_HTTP_BODY_TIMEOUT_S)"))

    def _refuse(self, problem: Problem) -> None:
        """Answer ``problem`` unless a response is already under way; stop reading."""
        if self._answered:
            return
        self._answered = True
        self._unparsed.clear()
        self._stop_timers()
        self._unset_keepalive_if_required()
        transport = self.transport
        if transport.is_closing():
            return
        cycle = self.cycle  # while a head arrives: the previous request's, answered
        answered = cycle is not None and not self._in_head and cycle.response_started
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app, if it runs, now reads a disconnect
            cycle.message_event.set()
        if answered:
            transport.close()
            return
        body = problem.encoded()
        head = [STATUS_LINE[problem.status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"content-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                    % (PROBLEM_TYPE.encode("ascii"), len(body)))
        transport.write(b"".join(head) + body)
        if transport.can_write_eof():
            transport.write_eof()
        self.loop.call_later(LINGER_S, transport.close)

    def _stop_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None


def bounded_protocol(limits: HttpLimits, on_write_idle: Callable[[], None] | None = None
                     ) -> type[BoundedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to ``limits``."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,),
                {"limits": limits,
                 "on_write_idle": (on_write_idle,) if on_write_idle is not None else ()})
