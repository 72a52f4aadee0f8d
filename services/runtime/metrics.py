"""The Prometheus metrics every agui-relay service shares, in the default registry.

One process runs one service (or all of them, under ``agui-relay up``), so
its metrics live in ``prometheus_client``'s default registry, rendered by
the health side door's ``/metrics`` (gatekeeper, producer) and appended to
the consumer service's own ``/metrics``. Names start with ``agui_``; no
label carries a thread, run or request id, so cardinality is fixed by the
deployment (agents, verdicts, codes, partitions), never by traffic.

Who records what (each in exactly one place):

- gatekeeper, after a partition's transaction commits: ``agui_decisions_total``
  {verdict, code}, ``agui_decision_latency_seconds`` (request ``submittedAt``
  to ``decidedAt``), ``agui_gatekeeper_processing_seconds`` (a batch's first
  request polled to its transaction committed); every few seconds, from its
  thread states: ``agui_threads`` {status}, ``agui_open_interrupts``,
  ``agui_expired_interrupts`` (expired, unanswered), ``agui_threads_running_too_long``;
- producer worker, around each run: ``agui_runs_started_total`` {agent},
  ``agui_runs_finished_total`` {agent, outcome}, ``agui_runs_in_flight`` {agent};
  recovery counts the runs it closes as outcome ``worker_lost``;
- every service: ``agui_dead_letters_total`` {service, reason} for each dead
  letter it writes, ``agui_dead_letters_lost_total`` {service, reason} for each
  one the broker refused even cut to its origin and reason (the record is
  skipped, an ERROR log naming it), ``agui_records_lost_to_retention_total``
  {group, topic} for the offsets a group's reader found removed by retention
  before it read them (``services.kafka.retention_losses``), and
  ``agui_consumer_lag`` {group, topic, partition} of its own consumers (end
  offset minus position);
- consumer service (its per-app registry, ``services.consumer.metrics``):
  ``agui_consumer_sse_streams_open`` and its request counters.

The instruments are created on first use (``instruments()``), not at
import, and registered once per process. The decision latency, observed
for every decision on the gatekeeper's hot path, is a ``LoopHistogram``:
the same exposition as a ``Histogram`` for a fifth of the cost per
observation (no lock: it is fed and scraped from the event loop's thread).
The labelled children a producer worker touches for every run (runs started,
in flight, finished; per agent and outcome) are looked up once and kept:
``labels()`` validates and locks on each call, a few microseconds per run.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily, Metric

__all__ = [
    "OUTCOMES",
    "Instruments",
    "LagRow",
    "LoopHistogram",
    "dead_letter",
    "dead_letter_lost",
    "decision",
    "instruments",
    "records_lost",
    "run_finished",
    "running",
    "set_lag",
]

OUTCOMES = ("success", "interrupt", "cancelled", "error", "worker_lost")
"""How a run ends, for ``agui_runs_finished_total``."""
NO_CODE = "none"
"""The ``code`` label of a decision without a rejection code (admitted, queued)."""
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                    30, 60)


class LoopHistogram:
    """A Prometheus histogram without locking, for one thread's hot path.

    ``prometheus_client.Histogram`` takes a lock and walks its buckets on each
    observation; this one finds the bucket by bisection and counts it in a
    list, and renders the standard ``_bucket``/``_count``/``_sum`` samples when
    scraped. Observations and scrapes must come from the same thread (the
    services' event loop), which is where the gatekeeper observes and the
    side door renders.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds = sorted(float(b) for b in buckets)
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is at least ``value``."""
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation)]

    def collect(self) -> list[Metric]:
        cumulative, total = [], 0
        for bound, count in zip([*self._bounds, float("inf")], self._counts, strict=True):
            total += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return [HistogramMetricFamily(self.name, self.documentation, buckets=cumulative,
                                      sum_value=self._sum)]


@dataclass(frozen=True)
class Instruments:
    """The shared instruments (see the module docstring for who records each)."""

    decisions: Counter
    decision_latency: LoopHistogram
    processing: Histogram
    runs_started: Counter
    runs_finished: Counter
    runs_in_flight: Gauge
    threads: Gauge
    open_interrupts: Gauge
    expired_interrupts: Gauge
    running_too_long: Gauge
    dead_letters: Counter
    dead_letters_lost: Counter
    records_lost: Counter
    consumer_lag: Gauge


CENSUS = frozenset({"agui_threads", "agui_open_interrupts", "agui_expired_interrupts",
                    "agui_threads_running_too_long"})
"""The gatekeeper's census gauges: registered in every process, meaningful only where a
gatekeeper sets them (``census_published``)."""
census_published = False
"""Whether this process's gatekeeper has set the census gauges: a consumer-service
instance's ``/metrics`` said ``agui_open_interrupts 0`` while its inbox held 1,006
(found by soak), so a process that never set them leaves them out."""


def without_unset_census() -> Any:
    """The default registry's collectors, less the census gauges when no gatekeeper of
    this process set them (for ``generate_latest``)."""
    if census_published:
        return REGISTRY

    class _Filtered:
        def collect(self) -> Any:
            return (m for m in REGISTRY.collect() if m.name not in CENSUS)
    return _Filtered()


@functools.cache
def instruments() -> Instruments:
    """The process's instruments, registered in the default registry on first call."""
    r = REGISTRY
    return Instruments(
        decisions=Counter("agui_decisions", "Gatekeeper decisions, by verdict and code",
                          ["verdict", "code"], registry=r),
        decision_latency=LoopHistogram(
            "agui_decision_latency_seconds",
            "From a request's submittedAt to its decision's decidedAt", _LATENCY_BUCKETS, r),
        processing=Histogram(
            "agui_gatekeeper_processing_seconds",
            "From polling a partition batch's first request to its transaction's commit",
            buckets=_LATENCY_BUCKETS, registry=r),
        runs_started=Counter("agui_runs_started", "Runs started by producer workers",
                             ["agent"], registry=r),
        runs_finished=Counter(
            "agui_runs_finished",
            "Runs ended, by outcome (success, interrupt, cancelled, error, worker_lost)",
            ["agent", "outcome"], registry=r),
        runs_in_flight=Gauge("agui_runs_in_flight", "Runs executing on this worker now",
                             ["agent"], registry=r),
        threads=Gauge("agui_threads", "Threads this gatekeeper owns that are not idle",
                      ["status"], registry=r),
        open_interrupts=Gauge("agui_open_interrupts",
                              "Interrupts open on this gatekeeper's threads", registry=r),
        expired_interrupts=Gauge(
            "agui_expired_interrupts",
            "Open interrupts past their expiresAt, still unanswered (cancel them to go on)",
            registry=r),
        running_too_long=Gauge(
            "agui_threads_running_too_long",
            "Threads whose run started longer ago than AGUI_RUNNING_TOO_LONG_S", registry=r),
        dead_letters=Counter("agui_dead_letters", "Dead letters written, by service and reason",
                             ["service", "reason"], registry=r),
        dead_letters_lost=Counter(
            "agui_dead_letters_lost",
            "Dead letters the broker refused even minimal: the record skipped, logged as ERROR",
            ["service", "reason"], registry=r),
        records_lost=Counter(
            "agui_records_lost_to_retention",
            "Offsets a consumer group found removed by retention before it read them",
            ["group", "topic"], registry=r),
        consumer_lag=Gauge(
            "agui_consumer_lag",
            "Records behind the end of each partition this process consumes (end - position)",
            ["group", "topic", "partition"], registry=r),
    )


def decision(verdict: str, code: str | None, submitted_at: datetime | None,
             decided_at: datetime) -> None:
    """Count one committed decision, and its latency when the submission time is known."""
    m = instruments()
    m.decisions.labels(verdict, code or NO_CODE).inc()
    if submitted_at is not None:
        m.decision_latency.observe(max((decided_at - submitted_at).total_seconds(), 0.0))


class _Running:
    """The block of one run: counted as started on entry, in flight until it exits."""

    __slots__ = ("_in_flight", "_started")

    def __init__(self, agent: str) -> None:
        self._started, self._in_flight = _run_children(agent)

    def __enter__(self) -> None:
        self._started.inc()
        self._in_flight.inc()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._in_flight.dec()


@functools.cache
def _run_children(agent: str) -> tuple[Counter, Gauge]:
    """``agent``'s started counter and in-flight gauge (looked up once per agent)."""
    m = instruments()
    return m.runs_started.labels(agent), m.runs_in_flight.labels(agent)


@functools.cache
def _finished_child(agent: str, outcome: str) -> Counter:
    """``agent``'s finished counter for ``outcome`` (looked up once per pair)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown run outcome {outcome!r}; expected one of {OUTCOMES}")
    return instruments().runs_finished.labels(agent, outcome)


def running(agent: str) -> _Running:
    """Count a run as started and in flight for the duration of the ``with`` block."""
    return _Running(agent)


def run_finished(agent: str, outcome: str) -> None:
    """Count a run's end (``outcome`` one of ``OUTCOMES``)."""
    _finished_child(agent, outcome).inc()


def dead_letter(service: str, reason: str) -> None:
    """Count one dead letter ``service`` wrote (``reason``: the letter's code)."""
    instruments().dead_letters.labels(service, reason).inc()


def dead_letter_lost(service: str, reason: str) -> None:
    """Count one dead letter ``service`` could not write (refused even minimal)."""
    instruments().dead_letters_lost.labels(service, reason).inc()


def records_lost(group: str, topic: str, count: int) -> None:
    """Count ``count`` offsets of ``topic`` that ``group`` lost to retention unread."""
    instruments().records_lost.labels(group, topic).inc(count)


@dataclass(frozen=True, slots=True)
class LagRow:
    """How far one consumer is behind on one partition."""

    topic: str
    partition: int
    lag: int


_lag_labels: dict[str, set[tuple[str, str, str]]] = {}
"""group → the label sets last published for it (to drop partitions given up)."""


def set_lag(group: str, rows: Iterable[LagRow]) -> None:
    """Publish ``group``'s lag per partition; partitions no longer listed are removed."""
    gauge = instruments().consumer_lag
    now = set()
    for row in rows:
        labels = (group, row.topic, str(row.partition))
        gauge.labels(*labels).set(max(row.lag, 0))
        now.add(labels)
    for gone in _lag_labels.get(group, set()) - now:
        gauge.remove(*gone)
    _lag_labels[group] = now


def sample_value(name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The current value of one sample in the default registry (tests, reports)."""
    value = REGISTRY.get_sample_value(name, dict(labels or {}))
    return None if value is None else float(value)
