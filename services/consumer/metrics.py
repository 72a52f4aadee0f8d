"""Prometheus metrics of one consumer-service instance.

Each app owns its registry (several apps can live in one test process
without colliding); ``/metrics`` renders it, followed by the process's
default registry: the metrics every service shares (``services.runtime.metrics``:
consumer lag, dead letters, and, under ``agui-relay up``, the gatekeeper's
and the workers') and the process collectors. No label ever carries a
thread, run or request id, so cardinality stays fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from services.runtime.metrics import without_unset_census

__all__ = ["CONTENT_TYPE", "ConsumerMetrics"]

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass
class ConsumerMetrics:
    """The instruments, registered in their own registry."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.streams_open = Gauge(
            "agui_consumer_sse_streams_open", "SSE streams open (live runs and replays)",
            registry=r)
        self.requests = Counter(
            "agui_consumer_requests", "Run requests by final outcome (verdict or error code)",
            ["verdict"], registry=r)
        self.decision_wait = Histogram(
            "agui_consumer_decision_wait_seconds",
            "Time from publishing a RunRequest to its final decision",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.streams_dropped = Counter(
            "agui_consumer_streams_dropped", "Streams ended early, by reason",
            ["reason"], registry=r)
        self.streams_to_log = Counter(
            "agui_consumer_streams_to_log",
            "Streams whose client fell a full queue behind and went on reading the log",
            registry=r)
        self.streams_rejoined = Counter(
            "agui_consumer_streams_rejoined",
            "Streams that caught up from the log and rejoined the live fan-out", registry=r)
        self.streams_idle_closed = Counter(
            "agui_consumer_streams_idle_closed",
            "Connections closed because the client read nothing for AGUI_STREAM_IDLE_S",
            registry=r)
        self.stream_log_readers = Gauge(
            "agui_consumer_stream_log_readers",
            "Log readers in use now (AGUI_STREAM_LOG_READERS): streams behind the fan-out "
            "and replays' scans", registry=r)
        self.log_turns_given_up = Counter(
            "agui_consumer_log_turns_given_up",
            "Log readers handed on to a stream or replay waiting for one, after "
            "their holder's slice", registry=r)
        self.log_turns_revoked = Counter(
            "agui_consumer_log_turns_revoked",
            "Log readers taken from a holder whose client read nothing for a slice after "
            "its turn came due, for the next in line", registry=r)
        self.replays_busy = Counter(
            "agui_consumer_replays_busy",
            "Replays answered 503 replay_busy: no log reader free", registry=r)
        self.stream_log_waiting = Gauge(
            "agui_consumer_stream_log_waiting",
            "Streams behind the fan-out waiting for a log reader (AGUI_STREAM_LOG_READERS)",
            registry=r)
        self.records_routed = Counter(
            "agui_consumer_records_routed", "Records read by the fan-out, by topic role",
            ["role"], registry=r)
        self.log_records_scanned = Counter(
            "agui_consumer_log_records_scanned",
            "Records read from the events topic to answer a replay (replay_full: from the "
            "partition's beginning), a retried forward or a repeated request (its "
            "admission replayed)",
            ["reason"], registry=r)
        self.forwards = Counter(
            "agui_consumer_forwards",
            "Requests for another instance's thread, by outcome (forwarded, "
            "failed_before_any_byte, then retried or served_here, or unavailable)",
            ["outcome"], registry=r)
        self.cancels = Counter(
            "agui_consumer_cancels", "Cancel commands published, by origin",
            ["origin"], registry=r)
        self.inbox_interrupts = Gauge(
            "agui_consumer_inbox_interrupts",
            "Open interrupts this instance's inbox index holds (every tenant's, every "
            "partition's: each instance holds them all)", registry=r)
        self.inbox_tool_calls = Gauge(
            "agui_consumer_inbox_tool_calls",
            "Gated tool calls the inbox index holds (AGUI_INBOX_TOOL_CALLS)", registry=r)

    def render(self) -> bytes:
        """The exposition text: this app's metrics, then the process's shared ones."""
        return generate_latest(self.registry) + generate_latest(without_unset_census())
