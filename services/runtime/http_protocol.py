"""The HTTP/1.1 protocol every service is served with: uvicorn's httptools one, bounded.

uvicorn's ``HttpToolsProtocol`` puts no limit on a request head and no clock
on a slow client: a head of 64 headers of 1 MiB each is parsed, kept and
handed to the app, and a head or a body that never finishes holds its
connection forever. ``BoundedHttpToolsProtocol`` keeps uvicorn's parser and
request cycle and adds, per connection:

- a size and a count for the head (``HeadLimits``): the parser's callbacks
  measure the request line and each header line as it completes (``name:
  value`` and CRLF, the usual form; the blank line ending the head is not
  counted), and the bytes received while a head is incomplete are counted as
  they arrive, so a single header that never ends is refused before it can
  grow the process. Over either limit: ``431 headers_too_large``. A subclass
  may let some heads be longer (``max_slack``, ``_head_slack``);
- a clock for the head (from a request's first byte until its head is
  complete) and one for the body (from the complete head until the complete
  body; it waits while the server itself has paused reading): late, ``408
  request_timeout``;
- an idle clock from the moment a connection opens (uvicorn arms its
  keep-alive timeout only after a response), and no keep-alive timeout while
  a request is arriving (the head clock is the one that counts then).

Pipelined requests are not parsed ahead: while a request's response is not
complete, the bytes that arrive after it are held unparsed, and reading is
paused once more than a head's worth is held; they are parsed when the
response completes. uvicorn parsed every request of a read and queued a
request cycle (~3 KiB) for each: 256 KiB of ``GET /healthz`` a client never
read grew the process by 18 MiB per connection. So a connection has one
request cycle at a time, a lost connection reaches the request being answered
(uvicorn marked only the last one parsed, a queued one), and a refusal is
about the request being answered or the next one after it, in order (one of a
pipelined request was read as the answer to the POST before it). To stop at a
message's end the parser is fed a head up to its blank line, a body by its
``Content-Length`` or, chunked, up to a blank line.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import httptools
import orjson
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

REQUEST_LINE_EXTRA = len(b"  HTTP/1.1\r\n")
"""Bytes of a request line besides its method and URL."""
HEADER_LINE_EXTRA = len(b": \r\n")
"""Bytes of a header line besides its name and value."""
RAW_SLACK = 1024
"""Bytes of an incomplete head allowed past the limit before the raw count refuses it
(room for the whitespace and line ends the measured count leaves out)."""
BLANK_LINE = b"\r\n\r\n"
"""What ends a head, and a chunked body (the last chunk's line, its trailers and this)."""
LINGER_S = 2.0
"""How long a refused connection keeps reading (and discarding) before it closes."""
PROBLEM_TYPE = "application/problem+json"
TYPE_BASE = "urn:agui-relay:problem:"


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """What one request head may be, and how long a head and a body may take."""

    max_header_bytes: int = 16_384
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    settings_named: bool = False
    """Whether a refusal names the ``AGUI_HTTP_*`` settings: they set the consumer
    service's limits only (the health port's are these defaults)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the protocol answers itself, as a problem document (RFC 9457)."""

    status: int
    title: str
    code: str
    detail: str

    def encoded(self) -> bytes:
        return orjson.dumps({"type": TYPE_BASE + self.code, "title": self.title,
                             "status": self.status, "detail": self.detail,
                             "code": self.code})


class Refused(Exception):  # noqa: N818 - a signal, not an error
    """Raised from a parser callback once the protocol has answered: stops the parse."""


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

    limits: ClassVar[HeadLimits] = HeadLimits()
    max_slack: ClassVar[int] = 0
    """Bytes past ``max_header_bytes`` the longest allowed head may have."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._in_head = True
        """No head is complete since the last message (or the connection) began."""
        self._receiving = False
        """A message has begun and is not complete."""
        self._raw_head = 0
        self._head_bytes = 0
        self._header_count = 0
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
        super().connection_made(transport)
        self.flow = HeldFlow(transport, self._holding)
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._unparsed.clear()
        self._stop_timers()
        super().connection_lost(exc)

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
            if self._raw_head > limits.max_header_bytes + RAW_SLACK + self.max_slack:
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
        """Whether more unparsed bytes are held than reading may go on with: the longest
        head allowed (``RAW_SLACK`` and ``max_slack`` included)."""
        return len(self._unparsed) > self.limits.max_header_bytes + RAW_SLACK + self.max_slack

    def send_400_response(self, msg: str) -> None:
        self._refuse(Refusal(400, "Invalid input", "invalid_request", msg))

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._receiving = True
        self._head_bytes = 0
        self._header_count = 0
        self._body_left = 0
        self._fed_tail = b""

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes + REQUEST_LINE_EXTRA > self.limits.max_header_bytes:
            self._refuse(self._too_large())
            raise Refused
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_bytes += len(name) + len(value) + HEADER_LINE_EXTRA
        self._frame_body(name, value)
        self._check_header(name, value)
        # past anything any head may be: refused now; the exact byte limit, which may
        # depend on the head's other lines (``_head_slack``), is applied once it is complete
        limits = self.limits
        if (self._header_count > limits.max_headers
                or self._head_bytes + REQUEST_LINE_EXTRA > limits.max_header_bytes
                + self.max_slack):
            self._refuse(self._too_large())
            raise Refused
        super().on_header(name, value)

    def _check_header(self, name: bytes, value: bytes) -> None:
        """A subclass's rule for one header line: refuse and raise ``Refused``, or note."""

    def _check_head(self) -> None:
        """A subclass's rule for a complete head, before the app sees it: refuse and
        raise ``Refused``, or pass."""

    def _head_slack(self) -> int:
        """Bytes past ``max_header_bytes`` this (complete) head may have."""
        return 0

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
        if size > self.limits.max_header_bytes + self._head_slack():
            self._refuse(self._too_large())
            raise Refused
        self._check_head()
        self._in_head = False
        self._raw_head = 0
        self._fed_tail = b""
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
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
    def _named(self, settings: str) -> str:
        return f" ({settings})" if self.limits.settings_named else ""

    def _too_large(self) -> Refusal:
        limits = self.limits
        return Refusal(
            431, "Request header fields too large", "headers_too_large",
            f"the request head exceeds {limits.max_header_bytes} bytes or "
            f"{limits.max_headers} header fields"
            + self._named("AGUI_HTTP_MAX_HEADER_BYTES, AGUI_HTTP_MAX_HEADERS"))

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._refuse(Refusal(
            408, "Request timeout", "request_timeout", f"the request head did not arrive "
            f"within {self.limits.header_timeout_s:g} s"
            + self._named("AGUI_HTTP_HEADER_TIMEOUT_S")))

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self.flow.read_paused:  # the server is not reading: not the client's delay
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s,
                                                    self._body_timed_out)
            return
        self._refuse(Refusal(
            408, "Request timeout", "request_timeout", f"the request body did not arrive "
            f"within {self.limits.body_timeout_s:g} s" + self._named("AGUI_HTTP_BODY_TIMEOUT_S")))

    def _refuse(self, problem: Refusal) -> None:
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


def bounded_protocol(limits: HeadLimits) -> type[BoundedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to ``limits``."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"limits": limits})
