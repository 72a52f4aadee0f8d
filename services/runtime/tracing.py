"""W3C Trace Context ``traceparent``: read, start and continue a trace, one span per hop.

A run crosses four processes — the consumer service (HTTP), the gatekeeper,
a producer worker, and whoever reads ``events`` — and only Kafka headers go
with it. Each hop reads the ``traceparent`` of the record (or request) it
received and writes a *child*: the same trace id, a fresh span id (its own
hop), the incoming flags. A missing or invalid header starts a new trace,
as the W3C recommendation says a receiver must
(https://www.w3.org/TR/trace-context/#traceparent-header). So one trace id
runs from the HTTP request to every event record of the run, and the span
ids tell the hops apart.

No tracing library is involved: a ``traceparent`` is 55 characters, and
this module is all agui-relay needs to carry one. An OpenTelemetry SDK
installed around the services would read and continue the same headers.
Pure: randomness comes from the ``entropy`` argument (``os.urandom`` by
default), so tests pass their own. ``within(hop)`` makes a hop the current
one for a task and the tasks it starts (a producer's run), so what the run
sends on its own — a delegated child run's request — continues its trace
(``current()``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["Entropy", "TraceParent", "current", "next_hop", "next_hop_bytes", "parse", "start",
           "within"]

Entropy = Callable[[int], bytes]
"""``n -> n random bytes`` (``os.urandom``)."""

_HEADER = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.S)
_V00 = re.compile(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_ZERO_TRACE_B = b"0" * 32
_ZERO_SPAN_B = b"0" * 16
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
SAMPLED = 0x01


@dataclass(frozen=True, slots=True)
class TraceParent:
    """One hop of a trace: ``00-<trace id>-<span id>-<flags>``."""

    trace_id: str
    """32 lowercase hex digits, not all zero: the whole run's trace."""
    span_id: str
    """16 lowercase hex digits, not all zero: the hop that wrote the header."""
    flags: int = SAMPLED

    def header(self) -> str:
        """The header value (always version 00, the one this module writes)."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"

    def child(self, entropy: Entropy = os.urandom) -> TraceParent:
        """The next hop: same trace and flags, a new span id."""
        return TraceParent(self.trace_id, _span_id(entropy), self.flags)


def parse(value: str | bytes | None) -> TraceParent | None:
    """The header's trace context, or None when it is absent or invalid.

    Invalid per the recommendation: not lowercase hex in the 2-32-16-2
    layout, version ``ff``, an all-zero trace or span id, or a version-00
    header with anything after the flags. A higher version may carry more
    fields after a ``-``; its first four are read as version 00's.
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    found = _HEADER.fullmatch(value.strip(" \t"))
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def start(entropy: Entropy = os.urandom) -> TraceParent:
    """A new trace (sampled: the relay records it in its headers and logs)."""
    trace_id = _ZERO_TRACE
    while trace_id == _ZERO_TRACE:
        trace_id = entropy(16).hex()
    return TraceParent(trace_id, _span_id(entropy), SAMPLED)


def next_hop(incoming: str | bytes | None, entropy: Entropy = os.urandom) -> TraceParent:
    """What a hop writes after receiving ``incoming``: its child, or a new trace."""
    parent = parse(incoming)
    return parent.child(entropy) if parent is not None else start(entropy)


def next_hop_bytes(incoming: bytes | None, entropy: Entropy = os.urandom) -> bytes:
    """``next_hop`` as header bytes, for the Kafka hot paths.

    A well-formed version-00 header (the usual case: the relay wrote it) is
    continued by replacing its span id in place, without building objects.
    """
    if (incoming is not None and _V00.fullmatch(incoming) is not None
            and incoming[3:35] != _ZERO_TRACE_B and incoming[36:52] != _ZERO_SPAN_B):
        return incoming[:36] + _span_id(entropy).encode("ascii") + incoming[52:]
    return next_hop(incoming, entropy).header().encode("ascii")


_CURRENT: ContextVar[TraceParent | None] = ContextVar("agui_trace", default=None)


@contextmanager
def within(hop: TraceParent) -> Iterator[None]:
    """``hop`` is the current one in this task (and the tasks it starts) for the block."""
    token = _CURRENT.set(hop)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> TraceParent | None:
    """The hop this task runs within, if any."""
    return _CURRENT.get()


def _span_id(entropy: Entropy) -> str:
    span = _ZERO_SPAN
    while span == _ZERO_SPAN:
        span = entropy(8).hex()
    return span
